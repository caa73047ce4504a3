"""``python -m trainguard.pod.rendezvous_store --port 29400``: the c10d rendezvous store of one PyTorch job.

On Kubernetes every torchrun agent of a job joins one c10d rendezvous as a client (``--rdzv-conf
is_host=false``); the TCPStore that holds the rendezvous runs here, in a pod of its own behind the job's
``<job>-rdzv`` Service, so that losing any worker pod never loses the rendezvous. The process only serves the
store: it imports torch and nothing of trainguard's (the image has torch; the Kubernetes client need not be
there). SIGTERM or SIGINT ends it with exit code 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
from datetime import timedelta

DEFAULT_PORT = 29400
#: How long a store operation of the server's own client may take (it makes none after the start).
TIMEOUT = timedelta(seconds=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainguard.pod.rendezvous_store", description=__doc__)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to serve on (all interfaces)")
    args = parser.parse_args(argv)
    # Blocked before the store exists, so that a SIGTERM during torch's import or the start is not lost.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)

    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    # The server listens on every interface; the host name is only where its own client connects.
    store = TCPStore("localhost", args.port, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    print(f"trainguard rendezvous store serving on port {store.port}", flush=True)
    received = signal.sigwait(stop_signals)
    print(f"trainguard rendezvous store: {signal.Signals(received).name}, stopping", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
