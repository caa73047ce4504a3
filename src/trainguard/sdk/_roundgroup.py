"""The process groups of one live member's current round (``trainguard.sdk.live``): made on the round's keys,
left, aborted from the watchdog's thread; and the groups of rounds past, kept until the next round has
completed a step (``bury``, ``free``).

Why they are kept: freeing a gloo group while its threads still finish an operation deadlocks (its destructor
joins them holding the GIL they need), and a round's forming can be quicker than they are on a busy machine.
Why connections are shut down: gloo cannot abort a collective (``ProcessGroupGloo.abort()`` returns and the wait
goes on); its pairs are TCP connections of the process, the ones that appear while the group is made, and
shutting them down (``trainguard.sdk._sockets``) makes every pending operation fail at once. While the groups
are made there are no connections yet, only waits for the other members' keys in the store: ``ended`` ends them
(``trainguard.sdk._storelink``).
"""

from __future__ import annotations

import contextlib
import threading
from datetime import timedelta
from typing import Any

from trainguard.pod.contract import LiveKeys
from trainguard.sdk import _nccl, _sockets, _transfer


class RoundGroup:
    def __init__(self, client: Any, keys: LiveKeys, backend: str, timeout: float) -> None:
        self.client = client
        self.keys = keys
        self.backend = backend
        self.timeout = timeout
        #: The connections of the round's groups (descriptor -> peer), shut down to leave the round.
        self.sockets: dict[int, str] = {}
        #: What holds the previous rounds' groups (errors and their frames, the groups).
        self.graveyard: list[Any] = []
        self.lock = threading.Lock()
        #: Set when the round is aborted, until the next round begins (``begin``): the waits of its groups'
        #: making end (``ReconnectingStore.interrupted_by``).
        self.ended = threading.Event()

    def begin(self) -> None:
        """A round closed: its groups are made from now on, and an abort ends them."""
        self.ended.clear()

    def make(self, round_: int, rank: int, world_size: int, again: int = 0) -> None:
        """The round's default group (torch.distributed's), its connections noted (``again``: made anew in the
        same round, the members in another order)."""
        import torch.distributed as dist

        self.leave()
        before = _sockets.sockets()
        dist.init_process_group(
            self.backend,
            store=dist.PrefixStore(self.keys.group(round_, again), self.client),  # type: ignore[attr-defined]
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=self.timeout),
        )
        with self.lock:
            self.sockets = _sockets.opened_since(before)

    def transfer(self, round_: int, rank: int, size: int) -> Any:
        """A gloo group of its own for the round's state transfer, its connections noted with the round's."""
        import torch.distributed as dist

        before = _sockets.sockets()
        group = dist.ProcessGroupGloo(
            dist.PrefixStore(self.keys.transfer(round_), self.client),  # type: ignore[attr-defined]
            rank,
            size,
            _transfer.group_options(timedelta(seconds=self.timeout)),
        )
        with self.lock:
            self.sockets.update(_sockets.opened_since(before))
        return group

    def leave(self) -> None:
        """The round's connections shut down and its default group let go (kept in the graveyard)."""
        import torch.distributed as dist

        with self.lock:
            _sockets.shut_down(self.sockets)
            self.sockets = {}
        if dist.is_initialized():
            self.graveyard.append(dist.group.WORLD)
            with contextlib.suppress(Exception):
                dist.destroy_process_group()

    def abort(self) -> int:
        """From another thread: every collective of the round fails at once (gloo's connections shut down,
        NCCL's communicator aborted); the connections shut down, and the groups being made fail."""
        self.ended.set()
        with self.lock:
            shut = _sockets.shut_down(self.sockets)
            if self.backend == "nccl":
                _nccl.abort()
        return shut

    def bury(self, held: Any) -> None:
        """Keep ``held`` (a failed round's error, a group) until ``free``."""
        self.graveyard.append(held)

    def free(self) -> None:
        """A whole step of the new round done: the old groups' threads are long idle."""
        if self.graveyard:
            self.graveyard.clear()
