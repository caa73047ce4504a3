"""The bandwidth probe between a job's pods: each pod's agent listens (``Listener``) and sends a fixed number
of bytes to the next pod of its role (``send``), the step a ring all-reduce repeats, and reads back how many
arrived. What a pod sent in what time is its ``net.bandwidth`` item; the control plane compares the pods' and
names the slowest (``trainguard.policy.faultcheck.slowest_link``).

Plain TCP from the standard library, so that it runs in every image (no torch, no NCCL): it measures the
links between the pods' network namespaces, which bound a ring all-reduce over them, not the GPUs' own fabric.

Standard library only, Python 3.8: it runs in users' images from the bundle.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time

#: What one write sends, and the most a listener takes from one connection (a larger sender is cut off).
CHUNK = 1 << 20
MOST = 1 << 30
#: Connections a listener serves at once (a ring has one predecessor; a few more are strays).
AT_ONCE = 4
#: A probe's reply: the bytes that arrived.
_COUNT = struct.Struct("!Q")


class Unreachable(OSError):
    """The next pod did not take a connection within the patience given."""


class Listener:
    """Serves the probe on ``port`` for as long as the agent lives (a predecessor may start its pre-check long
    after this pod's): each connection's bytes are counted and the count sent back."""

    def __init__(self, port: int, host: str = "") -> None:
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind((host, port))  # OSError (a port in use) for the caller to say
        self.server.listen(AT_ONCE)
        self.port = self.server.getsockname()[1]
        self._slots = threading.BoundedSemaphore(AT_ONCE)
        self._thread = threading.Thread(target=self._serve, name="trainguard-ring", daemon=True)
        self._thread.start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return  # closed
            if not self._slots.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._count, args=(conn,), name="trainguard-ring-in", daemon=True).start()

    def _count(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(60)
            got = 0
            buffer = bytearray(CHUNK)
            while got < MOST:
                n = conn.recv_into(buffer)
                if not n:
                    break
                got += n
            conn.sendall(_COUNT.pack(got))
        except OSError:
            pass
        finally:
            conn.close()
            self._slots.release()


def send(host: str, port: int, size: int, patience: float) -> float:
    """MB/s (10^6 bytes a second) from the first byte sent to ``host:port`` to its count of them back. A peer
    not reachable yet (not listening, its name not resolving yet) is tried again every half second for
    ``patience`` seconds; past it, ``Unreachable``. A count short of ``size``: ConnectionError."""
    started = time.monotonic()
    while True:
        try:
            conn = socket.create_connection((host.strip("[]"), port), timeout=patience)
            break
        except OSError as error:
            if time.monotonic() - started >= patience:
                raise Unreachable(
                    f"{host}:{port} took no connection within {patience:g} s: {error}"
                ) from None
            time.sleep(0.5)
    with conn:
        conn.settimeout(max(patience, 30.0))
        chunk = memoryview(bytes(min(CHUNK, size)))
        began = time.perf_counter()
        left = size
        while left > 0:
            conn.sendall(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))
        conn.shutdown(socket.SHUT_WR)
        reply = b""
        while len(reply) < _COUNT.size:
            part = conn.recv(_COUNT.size - len(reply))
            if not part:
                break
            reply += part
        seconds = max(time.perf_counter() - began, 1e-9)
    if len(reply) < _COUNT.size or _COUNT.unpack(reply)[0] != size:
        raise ConnectionError(f"{host}:{port} counted {reply!r} of {size} bytes")
    return size / 1e6 / seconds
