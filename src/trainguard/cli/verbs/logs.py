"""``trainguard logs JOB [POD] [-f]``: the output of a job's pods (all of them, each line prefixed by its
pod, or one pod's as it is). Logs are in ``$TRAINGUARD_HOME/logs/<job>/<pod>.log`` and keep every
incarnation of the pod; ``-f`` follows them until the job ends."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from trainguard.cli.verbs._local import call

POLL_SECONDS = 0.3


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("logs", help="print (or follow) the logs of a job's pods")
    parser.add_argument("job", metavar="JOB")
    parser.add_argument(
        "pod", metavar="POD", nargs="?", help="one pod, <job>-<role>-<index> (all when left out)"
    )
    parser.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new output until the job ends"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    answer = call("logs", job=args.job, pod=args.pod)
    tail = _Tail(prefix=args.pod is None)
    tail.pump(answer["pods"])
    try:
        while args.follow and answer["ongoing"]:
            time.sleep(POLL_SECONDS)
            answer = call("logs", job=args.job, pod=args.pod)
            tail.pump(answer["pods"])
        tail.pump(answer["pods"])
    except KeyboardInterrupt:
        return 130
    finally:
        tail.flush()
    return 0


class _Tail:
    """Prints what was appended to each file since last time (whole lines when prefixing)."""

    def __init__(self, prefix: bool) -> None:
        self._prefix = prefix
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, bytes] = {}

    def pump(self, files: dict[str, str]) -> None:
        for pod, path in files.items():
            try:
                with open(path, "rb") as handle:
                    handle.seek(self._offsets.get(pod, 0))
                    data = handle.read()
            except OSError:
                continue
            self._offsets[pod] = self._offsets.get(pod, 0) + len(data)
            self._write(pod, data)
        sys.stdout.flush()

    def _write(self, pod: str, data: bytes) -> None:
        out = sys.stdout.buffer
        if not self._prefix:
            out.write(data)
            return
        data = self._partial.pop(pod, b"") + data
        *lines, rest = data.split(b"\n")
        for line in lines:
            out.write(f"[{pod}] ".encode() + line + b"\n")
        if rest:
            self._partial[pod] = rest

    def flush(self) -> None:
        for pod, rest in self._partial.items():
            sys.stdout.buffer.write(f"[{pod}] ".encode() + rest + b"\n")
        self._partial.clear()
        sys.stdout.flush()
