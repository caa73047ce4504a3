"""``python -m trainguard.pod.rendezvous_store --port 29400``: the c10d rendezvous store of one PyTorch job.

On Kubernetes every torchrun agent of a job joins one c10d rendezvous as a client (``--rdzv-conf
is_host=false``); the TCPStore that holds the rendezvous runs here, in a pod of its own behind the job's
``<job>-rdzv`` Service, so that losing any worker pod never loses the rendezvous. The process only serves the
store, with ``trainguard.pod.tcpstore`` (torch's protocol in the standard library): it imports neither torch nor
anything else of trainguard's, so it serves within a fraction of a second of its start, in a few MB. SIGTERM or
SIGINT ends it with exit code 0.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from trainguard.pod.tcpstore import Server

DEFAULT_PORT = 29400


async def serve(port: int) -> str:
    """Serves until SIGTERM or SIGINT; the signal's name."""
    loop = asyncio.get_running_loop()
    stopped: asyncio.Future[str] = loop.create_future()

    def stop(name: str) -> None:
        if not stopped.done():
            stopped.set_result(name)

    for received in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(received, stop, received.name)
    server = Server(port)
    print(f"trainguard rendezvous store serving on port {await server.start()}", flush=True)
    try:
        return await stopped
    finally:
        await server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainguard.pod.rendezvous_store", description=__doc__)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to serve on (all interfaces)")
    args = parser.parse_args(argv)
    # Blocked until the loop handles them, so that a SIGTERM during the start is not lost.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(serve(args.port))
        loop.call_soon(signal.pthread_sigmask, signal.SIG_UNBLOCK, stop_signals)
        received = loop.run_until_complete(task)
    finally:
        loop.close()
    print(f"trainguard rendezvous store: {received}, stopping", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
