"""A job's live rounds in its store, as one member sees them: arriving in a round, reading who arrived and who
still beats, closing the round (``trainguard.sdk._rounds`` decides who is in it).

The keys are the pod contract's (``trainguard.pod.contract.LiveKeys``); ``trainguard.sdk.live`` drives the
rounds, this module reads and writes them, over a client that connects again when the store comes back
(``trainguard.sdk._storelink``). A store that comes back is empty; what a member knows is published again:

- at each reconnection, the last round it is in (its ``closed`` record, and ``latest`` raised to it): a
  newcomer arrives in the round after it, and waits for its members as in a store that was never lost;
- its arrival, when the store came back while it waits in a round (``join``);
- its beats resume by themselves (a counter added to); a ``gone`` mark set before is lost: that member is
  absent once its beats are stale.

A round the store forgot (the latest round is at or past it, and it has no ``closed`` record) closes for
nobody: its arrivals go on to the next (a newcomer that read ``latest`` before the survivors published it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from typing import Any

from trainguard.pod import contract
from trainguard.pod.contract import LiveKeys
from trainguard.sdk import _rounds
from trainguard.sdk._rounds import Arrival, Formed, Lateness, Staleness
from trainguard.sdk._storelink import Link, LiveError, connect

__all__ = ["LiveError", "RoundStore", "connect", "default_store", "ended_here", "finish_within"]

#: At the end of a run (``wait_while_running``), a member whose beats stopped is left only after this long (or
#: the run's own stale time, where longer). No collective says any more that it is alive, and a member's beats
#: can pause on a loaded machine while it completes its last step: leaving it then would fail that step's last
#: collective, and it would form a round alone. A member that ended is marked gone and is not waited for.
FINISH_STALE_AFTER = 15.0
#: At the end of a run, how long a member that still beats is waited for (or the collectives' bound, where
#: longer; ``finish_within``). A member that beats either ends its last step or fails its next collective within
#: that bound (and arrives in the next round): only one stuck outside both is left after this. Leaving a member
#: that is only slow (descheduled on a loaded machine, past the bound) would fail what is left of its last step,
#: and it would form a round alone.
FINISH_WITHIN = 120.0


def finish_within(timeout: float) -> float:
    """The bound of the wait at the end of a run (``RoundStore.wait_while_running``) for collectives bound by
    ``timeout`` seconds."""
    return max(timeout, FINISH_WITHIN)


class RoundStore:
    """One member's client of the rounds' keys (``client``: ``trainguard.sdk._storelink.connect``'s)."""

    def __init__(self, client: Any, keys: LiveKeys, member: str, poll: float) -> None:
        self.client = client
        self.keys = keys
        self.member = member
        self.poll = poll
        self.link: Link = client.link
        #: The last round this member is in: what it publishes again in a store that came back empty.
        self.formed: Formed | None = None
        self.link.on_reconnect(self.publish_again)

    def join(
        self,
        n: int,
        held: int,
        minimum: int,
        stale_after: float,
        timeout: float,
        join_timeout: float,
        silent: frozenset[str] = frozenset(),
    ) -> Formed | None:
        """Arrives in round ``n`` and waits for it to close: the round if this process is in it, None if it
        closed without it (it arrived too late: the next round then). ``silent``: members this process's
        watchdog found silent, absent at once unless they arrive."""
        client = self.client
        previous = self.members_of(n - 1)
        self._refuse_if_stale(previous)
        arrived_in = self.arrive(n, held)
        staleness = Staleness(stale_after)
        lateness = Lateness(timeout)
        arrived_at = time.monotonic()
        deadline = arrived_at + join_timeout
        closed = self.keys.closed(n)
        while True:
            if client.check([closed]):
                formed = Formed.loads(client.get(closed))
                self._refuse_if_stale(formed.members)
                return self._closed(formed)
            if self.link.generation != arrived_in:  # the store may have come back empty
                arrived_in = self.arrive(n, held)
            if self.forgotten(n):
                return None
            arrivals = self.arrivals(n)
            self._refuse_if_stale([a.member for a in arrivals])
            now = time.monotonic()
            # A member that beats but does not come within a collective's bound of the survivors' arrival is
            # stuck outside the group (in a device's kernel, a data loader...): the round forms without it too.
            late = lateness.late(previous, arrivals, now)
            absent = {
                m
                for m in _rounds.awaited(previous, arrivals, set())
                if late
                or m in silent
                or ended_here(m)
                or client.check([self.keys.gone(m)])
                or staleness.stale(m, self.beat(m), now)
            }
            decided = _rounds.close(n, previous, arrivals, absent, minimum)
            if decided is not None:
                formed = Formed.loads(client.compare_set(closed, "", decided.dumps()))
                client.set(self.keys.latest(), str(formed.round))
                return self._closed(formed)
            if now > deadline:
                raise LiveError(
                    f"live mode: round {n} did not form within {join_timeout:.0f} s: "
                    f"{len(arrivals)} arrived, waiting for {_rounds.awaited(previous, arrivals, absent)} "
                    f"(at least {minimum} needed)"
                )
            time.sleep(self.poll)

    def _refuse_if_stale(self, others: Iterable[str]) -> None:
        """A newer incarnation of this member's pod is in the rounds: this process is stale (its node was cut
        off and its pod replaced) and must not train beside it."""
        if self.member in _rounds.superseded([self.member, *others]):
            raise LiveError(
                f"live mode: a newer incarnation of this pod is in the job's rounds; this process ({self.member}) "
                "is a stale one and stops"
            )

    def arrive(self, n: int, held: int) -> int:
        """Arrives in round ``n`` with the state at step ``held``; the link's generation it arrived in."""
        generation = self.link.generation
        index = int(self.client.add(self.keys.arrivals(n), 1)) - 1
        self.client.set(self.keys.arrival(n, index), json.dumps({"member": self.member, "step": held}))
        return generation

    def _closed(self, formed: Formed) -> Formed | None:
        if self.member not in formed.members:
            return None
        self.formed = formed
        return formed

    def forgotten(self, n: int) -> bool:
        """Whether round ``n`` is one the store forgot: the latest round is at or past it, and it has no record
        (a store that came back empty, where the survivors published a later round again)."""
        closed = self.keys.closed(n)
        return self.latest() >= n and not self.client.check([closed])

    def publish_again(self, client: Any) -> None:
        """After a reconnection (``client``: the new connection): the last round this member is in, and the
        latest round raised to it, unless the store holds them (or a later one) already."""
        formed = self.formed
        if formed is None:
            return
        client.compare_set(self.keys.closed(formed.round), "", formed.dumps())
        key, mine = self.keys.latest(), str(formed.round)
        while True:
            current = client.get(key).decode() if client.check([key]) else ""
            if current and int(current) >= formed.round:
                return
            if client.compare_set(key, current, mine).decode() == mine:
                return

    def arrivals(self, n: int) -> list[Arrival]:
        return self.read_arrivals(self.client, n)[0]  # one counted but not written yet: not arrived

    def read_arrivals(self, client: Any, n: int) -> tuple[list[Arrival], bool]:
        """Round ``n``'s arrivals written so far (with ``client``: each thread has its own), and whether an
        arrival is counted but not written yet (whose it is cannot be known)."""
        count = int(client.add(self.keys.arrivals(n), 0))
        found = []
        for i in range(count):
            key = self.keys.arrival(n, i)
            if client.check([key]):
                raw = json.loads(client.get(key))
                found.append(Arrival(str(raw["member"]), int(raw["step"])))
        return found, len(found) < count

    def members_of(self, n: int) -> tuple[str, ...]:
        if n < 1:
            return ()
        key = self.keys.closed(n)
        return Formed.loads(self.client.get(key)).members if self.client.check([key]) else ()

    def latest(self) -> int:
        key = self.keys.latest()
        return int(self.client.get(key)) if self.client.check([key]) else 0

    def beat(self, member: str) -> int | None:
        key = self.keys.beat(member)
        return int(self.client.add(key, 0)) if self.client.check([key]) else None

    def silent(self, watch: Any, members: tuple[str, ...], staleness: Staleness, now: float) -> list[str]:
        """The other ``members`` (read with ``watch``, the watchdog's own client) marked gone, or whose beats
        have not changed for ``staleness.after`` seconds of this process's clock."""
        found = []
        for member in members:
            if member == self.member:
                continue
            beat = int(watch.add(self.keys.beat(member), 0))
            if staleness.stale(member, beat, now) or watch.check([self.keys.gone(member)]):
                found.append(member)
        return found

    def still_running(self, n: int, members: tuple[str, ...], staleness: Staleness, now: float) -> list[str]:
        """The other ``members`` of round ``n`` whose run has not ended: not marked finished, not left (gone, or
        silent for ``staleness.after``), not arrived in round ``n + 1`` (their collective failed)."""
        arrivals, _ = self.read_arrivals(self.client, n + 1)
        moved_on = {arrival.member for arrival in arrivals}
        left = set(self.silent(self.client, members, staleness, now))
        return [
            member
            for member in members
            if member != self.member
            and member not in moved_on
            and member not in left
            and not self.client.check([self.keys.finished(member)])
        ]

    def wait_while_running(self, n: int, members: tuple[str, ...], stale_after: float, within: float) -> None:
        """Returns once no other member of round ``n`` is ``still_running``, or after ``within`` seconds; a member
        silent for ``FINISH_STALE_AFTER`` (or ``stale_after``, where longer) has left."""
        staleness = Staleness(max(stale_after, FINISH_STALE_AFTER))
        deadline = time.monotonic() + within
        while (now := time.monotonic()) < deadline and self.still_running(n, members, staleness, now):
            time.sleep(self.poll)

    def only_newcomers(self, watch: Any, n: int, members: tuple[str, ...]) -> bool:
        """Whether round ``n``'s arrivals so far are all newcomers and no member of this round is marked gone
        (a scale-out or a replacement joining): then nothing is broken, and this round can end at a step's
        boundary. Any member's arrival (its collective failed) or gone mark is a fault: abort at once."""
        arrivals, unwritten = self.read_arrivals(watch, n)
        if unwritten or any(a.member in members for a in arrivals):
            return False
        return not any(watch.check([self.keys.gone(m)]) for m in members if m != self.member)


def ended_here(member: str) -> bool:
    """A member whose process is known to have ended: one counted in this process's pid namespace (the workers
    of one pod; the local runtime's pods, which share the machine's) whose pid is gone or names a process
    started since. Absent at once, with no wait for its beats to go stale. A member of another namespace
    (another pod, even one on the host's network with its host name) is never taken for ended here."""
    try:
        who = contract.Member.parse(member)
    except ValueError:  # not a member's id (another version's): only its beats tell
        return False
    if not who.space or who.space != contract.pid_space():
        return False
    return contract.process_started(who.pid) != who.started


def default_store() -> str:
    """The store rounds form on: ``TRAINGUARD_LIVE_STORE``, else the job's rendezvous store, else torch's master."""
    for name in (contract.ENV_LIVE_STORE, contract.ENV_RDZV_ENDPOINT):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    address, port = os.environ.get(contract.MASTER_ADDR), os.environ.get(contract.MASTER_PORT)
    if address and port:
        return f"{address}:{port}"
    raise LiveError(
        f"live mode: no store to form rounds on; set {contract.ENV_LIVE_STORE}=host:port (trainguard sets "
        f"{contract.ENV_RDZV_ENDPOINT} for its jobs)"
    )
