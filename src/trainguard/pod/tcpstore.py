"""A server of torch's TCPStore protocol in the standard library alone: what ``TCPStore(is_master=True)``
serves, for torch's own clients (``TCPStore(is_master=False)``, torchrun's c10d rendezvous, ``PrefixStore``).

The job's rendezvous store (``trainguard.pod.rendezvous_store``) serves with it, so that the store starts at once
and holds a few MB, where torch's own server first imports torch (seconds of CPU, hundreds of MB), and so that
it can run in an image without torch.

The protocol, as torch's servers speak it (its libuv server, the default since torch 2.4, and the older one):
a client's first message is ``VALIDATE`` and a magic number; then each message is one byte naming the query and
its arguments, in the machine's byte order (little-endian on every platform torch ships for): a key or a value
is a 64-bit length and its bytes, a count or a number 64 bits, a ping's nonce 32 bits. The queries that answer
are answered in the order they came; a ``WAIT`` (and a ``BARRIER``) answers once its keys are all there, or
when the client cancels it (``CANCEL_WAIT``, sent when the client's own timeout runs out). Values are bytes;
``ADD`` keeps a number as its decimal digits, as torch does, so that a ``GET`` of it reads the same.

Not here: torch's options that change nothing on the wire (its server's own client, ``wait_for_workers``) and
any query newer than torch 2.13's (``BARRIER`` is the newest): a client that sends one is disconnected, as
torch's server does with a query it does not know.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import deque
from collections.abc import Callable
from enum import IntEnum

#: What a client sends first, after ``VALIDATE``.
MAGIC = 0x3C85F7CE
#: Bounds on what a client may send, torch's own: a longer key or value, or more keys, ends the connection.
MAX_KEY_BYTES = 8 * 1024
MAX_VALUE_BYTES = 8 * 1024 * 1024
MAX_KEYS = 128 * 1024

_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")


class Query(IntEnum):
    """The queries, numbered as on the wire."""

    VALIDATE = 0
    SET = 1
    COMPARE_SET = 2
    GET = 3
    ADD = 4
    CHECK = 5
    WAIT = 6
    GETNUMKEYS = 7
    DELETE_KEY = 8
    APPEND = 9
    MULTI_GET = 10
    MULTI_SET = 11
    CANCEL_WAIT = 12
    PING = 13
    QUEUE_PUSH = 14
    QUEUE_POP = 15
    QUEUE_LEN = 16
    LIST_KEYS = 17
    BARRIER = 18


#: ``CHECK``'s answers.
READY, NOT_READY = 0, 1
#: What ends a ``WAIT`` (or a ``BARRIER``).
STOP_WAITING, WAIT_CANCELED = 0, 1


class Refused(Exception):
    """What a client sent breaks the protocol or its bounds: its connection ends."""


def vector(data: bytes) -> bytes:
    """A key or value as on the wire: its length, then its bytes."""
    return _U64.pack(len(data)) + data


class Waiter:
    """One client as the keys it waits for see it: where its answer goes."""

    def __init__(self, send: Callable[[bytes], None]) -> None:
        self.send = send


class Keys:
    """The store's keys, values and queues, and who waits for which; one thread acts on it (the server's loop)."""

    def __init__(self) -> None:
        self.values: dict[bytes, bytes] = {}
        self.queues: dict[bytes, deque[bytes]] = {}
        self._waiting: dict[bytes, list[Waiter]] = {}
        self._awaited: dict[Waiter, int] = {}

    def set(self, key: bytes, value: bytes) -> None:
        self.values[key] = value
        self._wake_all(key)

    def compare_set(self, key: bytes, expected: bytes, new: bytes) -> bytes:
        """torch's: a missing key is set where ``expected`` is empty (and ``new`` returned), else left missing
        (and ``expected`` returned); a present one is set where it equals ``expected``; the value it has is
        returned."""
        current = self.values.get(key)
        if current is None and expected:
            answer = expected  # left missing
        elif current is None or current == expected:
            self.values[key] = answer = new
        else:
            answer = current
        self._wake_all(key)
        return answer

    def add(self, key: bytes, amount: int) -> int:
        total = self._count(key, amount)
        self._wake_all(key)
        return total

    def append(self, key: bytes, value: bytes) -> None:
        self.values[key] = self.values.get(key, b"") + value
        self._wake_all(key)

    def delete(self, key: bytes) -> int:
        return 1 if self.values.pop(key, None) is not None else 0

    def ready(self, keys: list[bytes]) -> bool:
        return all(key in self.values or self.queues.get(key) for key in keys)

    def wait(self, keys: list[bytes], waiter: Waiter) -> bool:
        """True where every key is there now; otherwise ``waiter`` is answered once they all are."""
        if self.ready(keys):
            return True
        missing = [key for key in keys if key not in self.values]
        for key in missing:
            self._waiting.setdefault(key, []).append(waiter)
        self._awaited[waiter] = len(missing)
        return False

    def barrier(self, key: bytes, world_size: int, waiter: Waiter) -> bool:
        """One more arrival counted under ``key``: True where it is the last of ``world_size`` (every waiter
        before it is answered), otherwise ``waiter`` is answered once the last arrives."""
        count = self._count(key, 1)
        if count >= world_size:
            self._wake_all(key)
            return True
        self._waiting.setdefault(key, []).append(waiter)
        self._awaited[waiter] = 1
        return False

    def _count(self, key: bytes, amount: int) -> int:
        """The number under ``key`` (none: 0) plus ``amount``, kept as its decimal digits."""
        total = amount + (int(self.values[key]) if key in self.values else 0)
        self.values[key] = str(total).encode()
        return total

    def push(self, key: bytes, value: bytes) -> None:
        self.queues.setdefault(key, deque()).append(value)
        self._wake_one(key)

    def pop(self, key: bytes) -> bytes:
        """The queue's length before the pop, then the value popped (none where it was empty)."""
        queue = self.queues.get(key)
        if not queue:
            return _I64.pack(0)
        return _I64.pack(len(queue)) + vector(queue.popleft())

    def forget(self, waiter: Waiter) -> None:
        """The client cancelled its wait, or left."""
        if self._awaited.pop(waiter, None) is None:
            return
        for key in list(self._waiting):
            left = [w for w in self._waiting[key] if w is not waiter]
            if left:
                self._waiting[key] = left
            else:
                del self._waiting[key]

    def _wake_all(self, key: bytes) -> None:
        for waiter in self._waiting.pop(key, []):
            self._arrived(waiter)

    def _wake_one(self, key: bytes) -> None:
        waiters = self._waiting.get(key, [])
        while waiters:
            waiter = waiters.pop(0)
            if self._arrived(waiter):
                break
        if not waiters:
            self._waiting.pop(key, None)

    def _arrived(self, waiter: Waiter) -> bool:
        left = self._awaited.get(waiter)
        if left is None:
            return False
        if left > 1:
            self._awaited[waiter] = left - 1
            return False
        del self._awaited[waiter]
        waiter.send(_U8.pack(STOP_WAITING))
        return True


class _Reader:
    """One client's messages, field by field."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.stream = stream

    async def u8(self) -> int:
        return (await self.stream.readexactly(1))[0]

    async def u32(self) -> int:
        return int(_U32.unpack(await self.stream.readexactly(4))[0])

    async def i64(self) -> int:
        return int(_I64.unpack(await self.stream.readexactly(8))[0])

    async def count(self) -> int:
        count = int(_U64.unpack(await self.stream.readexactly(8))[0])
        if count > MAX_KEYS:
            raise Refused(f"{count} keys in one query (at most {MAX_KEYS})")
        return count

    async def key(self) -> bytes:
        return await self._sized(MAX_KEY_BYTES, "key")

    async def value(self) -> bytes:
        return await self._sized(MAX_VALUE_BYTES, "value")

    async def keys(self) -> list[bytes]:
        return [await self.key() for _ in range(await self.count())]

    async def _sized(self, bound: int, what: str) -> bytes:
        size = int(_U64.unpack(await self.stream.readexactly(8))[0])
        if size > bound:
            raise Refused(f"a {what} of {size} bytes (at most {bound})")
        return await self.stream.readexactly(size)


def listening(port: int) -> socket.socket:
    """One socket on ``port`` for IPv6 and IPv4 both, as torch's server listens (IPv4 alone where the machine
    has no IPv6): one port for both, also when ``port`` is 0."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        address: tuple[str, int] = ("::", port)
    except OSError:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        address = ("0.0.0.0", port)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class Server:
    """Serves one store on ``port`` (0: any free one), on every interface."""

    def __init__(self, port: int = 0) -> None:
        self.requested_port = port
        self.keys = Keys()
        self._server: asyncio.AbstractServer | None = None
        self._clients: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def start(self) -> int:
        """Listens; the port it listens on."""
        self._server = await asyncio.start_server(self._client, sock=listening(self.requested_port))
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stops listening and ends every client's connection."""
        if self._server is not None:
            self._server.close()
        for writer in self._clients.values():
            writer.transport.abort()  # its reads end, and with them its task
        await asyncio.gather(*self._clients, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _client(self, stream: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reader = _Reader(stream)
        waiter = Waiter(writer.write)
        task = asyncio.current_task()
        if task is not None:
            self._clients[task] = writer
        try:
            if await reader.u8() != Query.VALIDATE or await reader.u32() != MAGIC:
                return  # not a TCPStore client
            while True:
                first = await stream.read(1)
                if not first:
                    return
                await self._answer(first[0], reader, waiter)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, Refused, ValueError):
            return  # gone, or broke the protocol: its connection ends, as with torch's server
        finally:
            self._clients.pop(task, None)  # type: ignore[arg-type]
            self.keys.forget(waiter)
            writer.close()

    async def _answer(self, query: int, reader: _Reader, waiter: Waiter) -> None:
        keys, send = self.keys, waiter.send
        if query == Query.SET:
            keys.set(await reader.key(), await reader.value())
        elif query == Query.COMPARE_SET:
            key, expected, new = await reader.key(), await reader.value(), await reader.value()
            send(vector(keys.compare_set(key, expected, new)))
        elif query == Query.GET:
            send(vector(keys.values.get(await reader.key(), b"")))
        elif query == Query.ADD:
            key = await reader.key()
            send(_I64.pack(keys.add(key, await reader.i64())))
        elif query == Query.CHECK:
            send(_U8.pack(READY if keys.ready(await reader.keys()) else NOT_READY))
        elif query == Query.WAIT:
            if keys.wait(await reader.keys(), waiter):
                send(_U8.pack(STOP_WAITING))
        elif query == Query.GETNUMKEYS:
            send(_I64.pack(len(keys.values)))
        elif query == Query.DELETE_KEY:
            send(_I64.pack(keys.delete(await reader.key())))
        elif query == Query.APPEND:
            keys.append(await reader.key(), await reader.value())
        elif query == Query.MULTI_GET:
            send(b"".join(vector(keys.values.get(key, b"")) for key in await reader.keys()))
        elif query == Query.MULTI_SET:
            for _ in range(await reader.count()):
                keys.set(await reader.key(), await reader.value())
        elif query == Query.CANCEL_WAIT:
            keys.forget(waiter)
            send(_U8.pack(WAIT_CANCELED))
        elif query == Query.PING:
            send(_U32.pack(await reader.u32()))
        elif query == Query.QUEUE_PUSH:
            keys.push(await reader.key(), await reader.value())
        elif query == Query.QUEUE_POP:
            send(keys.pop(await reader.key()))
        elif query == Query.QUEUE_LEN:
            send(_I64.pack(len(keys.queues.get(await reader.key(), ()))))
        elif query == Query.LIST_KEYS:
            send(_I64.pack(len(keys.values)) + b"".join(vector(key) for key in keys.values))
        elif query == Query.BARRIER:
            key = await reader.key()
            if keys.barrier(key, await reader.i64(), waiter):
                send(_U8.pack(STOP_WAITING))
        else:
            raise Refused(f"unknown query {query}")
