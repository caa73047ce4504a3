"""The buddy of a shard: a peer's worker that keeps a copy of each new snapshot of the shard in its node's shared
memory (``buddy-<sender's key>``), so that a pod or node lost as a whole leaves the shard there.

- ``pair`` (every rank of a sharded state, at once): each rank starts a ``Receiver``, the ranks exchange their
  addresses, and each sends to its buddy (``trainguard.sdk._pairing.buddy_of``: the next rank on another node
  when there is one).
- ``Sender``: a thread that sends each new snapshot; one not sent yet is replaced by a newer one, and
  ``safe_step`` is the newest that reached the buddy.
- The wire, one snapshot per connection (``send``): a header (one JSON line: token, key, meta and data lengths),
  the meta's bytes, the data's bytes; the receiver answers one line, ``ok <step>``, once the slot is complete
  in its memory (``full`` when it has no room for it: the sender's snapshot stays unsafe).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainguard.pod import contract
from trainguard.sdk import _shm
from trainguard.sdk._disk import HEADROOM
from trainguard.sdk._dist import all_gather, broadcast_token
from trainguard.sdk._pairing import buddy_of

#: How long the interpreter's exit waits for a send under way to end.
EXIT_WAIT_SECONDS = 2.0


def pair(
    directory: Path, key: str, rank: int, changed: threading.Condition, newest: Callable[[], _shm.Slot | None]
) -> tuple[Receiver, Sender | None]:
    """Call it on every rank at once (collectives): this rank's ``Receiver`` into ``directory``, and a
    ``Sender`` of its snapshots (``newest()``, ``changed`` notified when it changes) to its buddy (None when
    alone)."""
    token = broadcast_token()
    node = os.environ.get(contract.ENV_NODE_NAME) or os.environ.get("NODE_NAME") or socket.gethostname()
    receiver = Receiver(directory, bind_host(), token)
    peers = all_gather((node, receiver.address, key))
    buddy = buddy_of(rank, [peer[0] for peer in peers])
    if buddy is None:
        return receiver, None
    return receiver, Sender(peers[buddy][1], peers[buddy][2], token, key, changed, newest)


def bind_host() -> str:
    """Where peers reach this rank: ``$TRAINGUARD_SNAPSHOT_HOST``, loopback when the job's master is on it
    (one machine), else ``$POD_IP`` or this host's address."""
    given = os.environ.get(contract.ENV_SNAPSHOT_HOST, "").strip()
    if given:
        return given
    master = os.environ.get(contract.MASTER_ADDR, "")
    try:
        if master and socket.gethostbyname(master).startswith("127."):
            return "127.0.0.1"
    except OSError:
        pass
    return os.environ.get("POD_IP", "").strip() or socket.gethostbyname(socket.gethostname())


class Sender:
    """A thread that sends each new snapshot of this rank (``newest()``, read under ``changed``, which its
    owner notifies when it changes) to the buddy at ``address`` (its key: ``name``)."""

    def __init__(
        self,
        address: tuple[str, int],
        name: str,
        token: str,
        key: str,
        changed: threading.Condition,
        newest: Callable[[], _shm.Slot | None],
    ) -> None:
        self.address = address
        self.name = name
        self._token = token
        self._key = key
        self._changed = changed
        self._newest = newest
        #: The newest step that reached the buddy.
        self.safe_step: int | None = None
        #: True while the buddy cannot be reached.
        self.failing = False
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="trainguard-snapshot-sender", daemon=True)
        self._thread.start()
        # At the interpreter's exit the thread is stopped first, and a send under way is given a moment: a
        # daemon thread still writing (its warning on stderr) while Python finalizes aborts the process.
        atexit.register(self.stop, EXIT_WAIT_SECONDS)

    def stop(self, wait: float = 0.0) -> None:
        """Send nothing more; ``wait``: at most this long for a send under way to end."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        if wait > 0 and self._thread is not threading.current_thread():
            self._thread.join(wait)

    def wait_safe(self, seconds: float) -> bool:
        """Wait until the newest snapshot has reached the buddy (True), or ``seconds`` (False); False at once
        while the buddy cannot be reached."""
        deadline = time.monotonic() + seconds
        with self._changed:
            while (latest := self._newest()) is not None and self.safe_step != latest.step:
                if self.failing:  # gone (a lost peer): waiting would only delay the stop
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def _run(self) -> None:
        sent: int | None = None
        while True:
            with self._changed:
                slot = self._newest()
                while not self._stopped and (slot is None or slot.step == sent):
                    self._changed.wait()
                    slot = self._newest()
                if self._stopped:
                    return
            assert slot is not None
            try:
                send(self.address, self._token, self._key, slot)
            except FileNotFoundError:
                continue  # written over meanwhile: the newer one goes next
            except OSError as error:
                with self._changed:
                    if self._stopped:  # stopped meanwhile (the process ends): nothing to say
                        return
                    if not self.failing:
                        print(f"trainguard: snapshots cannot reach the buddy {self.address}: {error}; retrying",
                              file=sys.stderr, flush=True)  # fmt: skip
                    self.failing = True
                    self._changed.notify_all()
                    self._changed.wait(1.0)
                continue
            sent = slot.step
            with self._changed:
                self.failing = False
                self.safe_step = slot.step
                self._changed.notify_all()


def send(address: tuple[str, int], token: str, key: str, slot: _shm.Slot) -> None:
    with slot.reading() as (fd, size), socket.create_connection(address, timeout=30) as conn:
        meta = slot.meta_bytes()  # under the lock: the meta ``reading`` found to be the listed one
        header = {"token": token, "key": key, "meta": len(meta), "data": size}
        conn.sendall(json.dumps(header).encode() + b"\n" + meta)
        with os.fdopen(os.dup(fd), "rb") as handle:
            conn.sendfile(handle, 0, size)
        answer = conn.makefile("rb").readline().decode().strip()
    if answer != f"ok {slot.step}":
        raise OSError(f"the buddy answered {answer!r}")


class Receiver:
    """Keeps the snapshots peers send in this node's shared memory (``buddy-<sender's key>``)."""

    def __init__(self, directory: Path, host: str, token: str) -> None:
        self.directory = directory
        self.token = token
        self._server = socket.create_server((host, 0))
        self.address = (host, self._server.getsockname()[1])
        self._writers: dict[str, _shm.SlotWriter] = {}
        self._stopped = False
        threading.Thread(target=self._serve, name="trainguard-snapshot-receiver", daemon=True).start()

    def stop(self) -> None:
        self._stopped = True
        self._server.close()
        for writer in self._writers.values():
            writer.close()

    def _serve(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._take, args=(conn,), daemon=True).start()

    def _take(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(60)
            reader = conn.makefile("rb")
            try:
                header = json.loads(reader.readline(4096))
                if header.get("token") != self.token or "/" in str(header.get("key")):
                    return
                meta = _read_full(reader, int(header["meta"]))
                key, size = str(header["key"]), int(header["data"])
                writer = self._writers.get(key)
                held = _shm.tree_size(self.directory / f"buddy-{key}")
                if size * HEADROOM > _shm.bytes_free(self.directory) + held:
                    conn.sendall(b"full\n")  # the sender's snapshot stays unsafe; this node keeps working
                    return
                if writer is None:
                    writer = self._writers[key] = _shm.SlotWriter(self.directory / f"buddy-{key}")
                try:
                    slot = writer.write_bytes(meta, lambda view: _read_into(reader, view), size)
                except _shm.NoRoom:  # past the check, yet the pages were not there (taken since)
                    conn.sendall(b"full\n")
                    return
                conn.sendall(f"ok {slot.step}\n".encode())
            except (OSError, ValueError, KeyError, _shm.SnapshotFormatError):
                return


def _read_full(reader: Any, size: int) -> bytes:
    data = reader.read(size)
    if len(data) != size:
        raise OSError("the connection ended inside a snapshot")
    return bytes(data)


def _read_into(reader: Any, view: memoryview) -> None:
    done = 0
    while done < len(view):
        got = reader.readinto(view[done:])
        if not got:
            raise OSError("the connection ended inside a snapshot")
        done += got
