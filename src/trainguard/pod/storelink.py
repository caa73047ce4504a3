"""A store client that connects again when its connection is lost: the job's store as live mode reaches it
(``trainguard.sdk._storelink``), and the c10d rendezvous store as trainguard's torchrun agents reach it
(``trainguard.pod.torchrun``).

The store's server can go away and come back on the same address (its pod re-created, its process restarted),
and every connection to it then fails. ``store_class()`` gives a ``torch.distributed.Store`` over a
``Connection``: an operation that fails so (torch's ``DistNetworkError``) connects to the same address again and
is retried, for at most ``RECONNECT_WITHIN`` seconds, then raises the link's ``Unreachable`` error; any other
error (a key not set within the store's timeout) is the operation's own. The ``PrefixStore`` s made over it
reconnect with it.

While a live round's groups are made, the waits for the other members' keys can be interrupted
(``ReconnectingStore.interrupted_by``): a member lost after its round closed never writes its keys, and the
others would wait for them up to the round's bound (the hang timeout, 30 minutes by default).

A store that comes back is empty. All of this process's connections to one address share a ``Link``: after any
of them connects again, the link counts it (``generation``) and calls what was registered with
``on_reconnect`` with the new connection, once per reconnection (``trainguard.sdk._roundstore``: the rounds
publish again what a member knows of them).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import lru_cache
from typing import Any, TypeVar

#: How long one store operation may wait for a key (the client's timeout), and the first connection's bound.
STORE_TIMEOUT = timedelta(seconds=60)
#: The longest pause between two looks for the keys awaited by an interruptible wait (the first is 1 ms).
WAIT_POLL = 0.02
#: How long an operation whose connection was lost tries to connect again before it gives up.
RECONNECT_WITHIN = 60.0
#: The pause between two tries to connect again (each try itself waits for the server up to the bound).
RECONNECT_PAUSE = 0.2


T = TypeVar("T")


class Unreachable(RuntimeError):
    """The store was lost and could not be reached again within ``RECONNECT_WITHIN``."""


class Link:
    """This process's way to the store at ``address``: ``open_(seconds)`` connects (waiting up to ``seconds``
    for the server), an error in ``lost`` is a lost connection; one that cannot be made again in time raises
    ``unreachable`` (its message begins with ``who``, the link's user)."""

    def __init__(
        self,
        address: str,
        open_: Callable[[float], Any],
        lost: tuple[type[BaseException], ...],
        *,
        unreachable: type[Exception] = Unreachable,
        who: str = "trainguard",
        within: float = RECONNECT_WITHIN,
        pause: float = RECONNECT_PAUSE,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.address = address
        self.open_ = open_
        self.lost = lost
        self.unreachable = unreachable
        self.who = who
        self.within = within
        self.pause = pause
        self.clock = clock
        self.sleep = sleep
        #: How many times a connection of this link connected again.
        self.generation = 0
        self._hooks: list[weakref.WeakMethod[Callable[[Any], None]]] = []
        self._lock = threading.Lock()

    def on_reconnect(self, method: Callable[[Any], None]) -> None:
        """Calls ``method(client)`` after each reconnection (a bound method, held weakly: its object's end
        ends it)."""
        with self._lock:
            self._hooks.append(weakref.WeakMethod(method))

    def reconnect(self, error: BaseException, deadline: float) -> Any:
        """A new connection, once the server answers again; ``unreachable`` past ``deadline``."""
        while True:
            left = deadline - self.clock()
            if left <= 0:
                raise self.unreachable(
                    f"{self.who}: lost the store at {self.address} and could not reach it again within "
                    f"{self.within:.0f} s ({first_line(error)})"
                ) from error
            try:
                client = self.open_(left)
            except Exception as failed:  # not there yet
                error = failed
                self.sleep(min(self.pause, max(deadline - self.clock(), 0.0)))
                continue
            with self._lock:
                self.generation += 1
                hooks = [hook() for hook in self._hooks]
                self._hooks = [hook for hook in self._hooks if hook() is not None]
            for hook in hooks:
                if hook is not None:
                    with contextlib.suppress(Exception):  # lost again: the next operation reconnects again
                        hook(client)
            return client


class Connection:
    """One connection over a ``Link``: ``call`` runs an operation on it, on a new connection when it is lost."""

    def __init__(self, link: Link, client: Any) -> None:
        self.link = link
        self.client = client
        #: The timeout last set through this connection: a new connection gets it too.
        self.timeout: timedelta | None = None

    def call(self, operation: str, *args: Any) -> Any:
        return self.run(lambda client: getattr(client, operation)(*args))

    def set(self, key: str, value: Any) -> None:
        """``set`` gets no answer: one written into a connection already lost looks done. A ``check`` of the key
        on the same connection answers for it (and the ``set`` is made again on a new one when it fails)."""
        self.run(lambda client: (client.set(key, value), client.check([key])))

    def run(self, action: Callable[[Any], T]) -> T:
        """``action(client)``, again on a new connection each time the one it ran on is lost."""
        deadline: float | None = None
        while True:
            client = self.client
            try:
                return action(client)
            except self.link.lost as error:
                if deadline is None:
                    deadline = self.link.clock() + self.link.within
                client = self.link.reconnect(error, deadline)
                if self.timeout is not None:
                    with contextlib.suppress(*self.link.lost):
                        client.set_timeout(self.timeout)
                self.client = client


def open_tcp(address: str, seconds: float, timeout: timedelta = STORE_TIMEOUT) -> Any:
    """A client of torch's TCPStore at ``address`` (``host:port``), waiting up to ``seconds`` for the server;
    its operations wait up to ``timeout``."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    host, _, port = address.rpartition(":")
    client = TCPStore(host.strip("[]"), int(port), is_master=False, timeout=timedelta(seconds=seconds))
    client.set_timeout(timeout)
    return client


@lru_cache(maxsize=1)
def store_class() -> type:
    """The ``torch.distributed.Store`` over a ``Connection`` (made once torch is imported: its users import it
    lazily). torch calls these methods from C++ too: the ``PrefixStore`` s over it."""
    import torch.distributed as dist

    class ReconnectingStore(dist.Store):  # type: ignore[name-defined,misc]
        def __init__(self, connection: Connection) -> None:
            super().__init__()
            self.connection = connection
            self.link = connection.link
            #: Set (from another thread) to end the waits for keys at once; None: they wait as the store's.
            self.interrupt: threading.Event | None = None

        @contextlib.contextmanager
        def interrupted_by(self, event: threading.Event) -> Iterator[None]:
            """Within: a wait for keys (``get``, ``wait``, torch's calls from C++ included) raises
            ``RuntimeError`` once ``event`` is set, as a collective whose peer is lost does."""
            self.interrupt = event
            try:
                yield
            finally:
                self.interrupt = None

        def _wait_for(self, keys: list[str], timeout: timedelta | None) -> None:
            """Waits for ``keys`` by looking (a server's wait cannot be ended early), until ``interrupt``."""
            event = self.interrupt
            assert event is not None
            bound = timeout if timeout else (self.connection.timeout or STORE_TIMEOUT)
            deadline = time.monotonic() + bound.total_seconds()
            pause = 0.001
            while not self.connection.call("check", keys):
                if event.is_set():
                    raise RuntimeError(f"live: the round ended while waiting for {', '.join(keys)}")
                if time.monotonic() >= deadline:
                    raise dist.DistStoreError(f"wait timeout after {bound}, keys: {', '.join(keys)}")
                time.sleep(pause)
                pause = min(pause * 2, WAIT_POLL)

        def set(self, key: str, value: Any) -> None:
            self.connection.set(key, value)

        def get(self, key: str) -> bytes:
            if self.interrupt is not None:
                self._wait_for([key], None)
            return self.connection.call("get", key)  # type: ignore[no-any-return]

        def add(self, key: str, amount: int) -> int:
            return self.connection.call("add", key, amount)  # type: ignore[no-any-return]

        def check(self, keys: list[str]) -> bool:
            return self.connection.call("check", keys)  # type: ignore[no-any-return]

        def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
            return self.connection.call("compare_set", key, expected, desired)  # type: ignore[no-any-return]

        def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
            if self.interrupt is not None:
                self._wait_for(keys, timeout)
            elif timeout is None:
                self.connection.call("wait", keys)
            else:
                self.connection.call("wait", keys, timeout)

        def multi_get(self, keys: list[str]) -> list[bytes]:
            return self.connection.call("multi_get", keys)  # type: ignore[no-any-return]

        def multi_set(self, keys: list[str], values: list[Any]) -> None:
            self.connection.run(lambda client: (client.multi_set(keys, values), client.check(keys)))

        def delete_key(self, key: str) -> bool:
            return self.connection.call("delete_key", key)  # type: ignore[no-any-return]

        def num_keys(self) -> int:
            return self.connection.call("num_keys")  # type: ignore[no-any-return]

        def set_timeout(self, timeout: timedelta) -> None:
            self.connection.timeout = timeout
            self.connection.call("set_timeout", timeout)

    return ReconnectingStore


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
