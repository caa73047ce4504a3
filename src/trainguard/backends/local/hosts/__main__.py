"""``python -m trainguard.backends.local.hosts [serve]``: a Horovod trainer pod's host process (the local
stand-in for sshd); ``python -m trainguard.backends.local.hosts ssh [options] HOST COMMAND``: the launcher's ssh.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> int:
    if argv[:1] == ["ssh"]:
        from trainguard.backends.local.hosts import ssh

        return ssh.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m trainguard.backends.local.hosts",
        description="Run in a Horovod trainer pod of the local runtime instead of sshd: runs the commands "
        "that the launcher's horovodrun sends through ssh. 'ssh [options] HOST COMMAND' is that ssh.",
    )
    parser.add_argument("mode", nargs="?", choices=["serve"], default="serve")
    parser.add_argument("--name", help="the pod served (default: $TRAININGJOB_POD_NAME)")
    parser.add_argument("--hosts-dir", help="where hosts publish themselves (default: $TRAINGUARD_HOSTS_DIR)")
    args = parser.parse_args(argv)
    from trainguard.backends.local.hosts import serve

    return serve.main(args.name, args.hosts_dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
