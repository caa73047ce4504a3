"""A job's live rounds in its store, as one member sees them: arriving in a round, reading who arrived and who
still beats, closing the round (``trainguard.sdk._rounds`` decides who is in it), and the store itself.

The keys are the pod contract's (``trainguard.pod.contract.LiveKeys``); ``trainguard.sdk.live`` drives the
rounds, this module reads and writes them.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from typing import Any

from trainguard.pod import contract
from trainguard.pod.contract import LiveKeys
from trainguard.sdk import _rounds
from trainguard.sdk._rounds import Arrival, Formed, Lateness, Staleness

STORE_TIMEOUT = timedelta(seconds=60)


class LiveError(RuntimeError):
    """Live mode cannot go on: the store is unreachable, a round did not form in time, or the training
    function failed ``MAX_FAILED_FORMATIONS`` times in a row."""


class RoundStore:
    """One member's client of the rounds' keys."""

    def __init__(self, client: Any, keys: LiveKeys, member: str, poll: float) -> None:
        self.client = client
        self.keys = keys
        self.member = member
        self.poll = poll

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
        index = int(client.add(self.keys.arrivals(n), 1)) - 1
        client.set(self.keys.arrival(n, index), json.dumps({"member": self.member, "step": held}))
        previous = self.members_of(n - 1)
        staleness = Staleness(stale_after)
        lateness = Lateness(timeout)
        arrived_at = time.monotonic()
        deadline = arrived_at + join_timeout
        closed = self.keys.closed(n)
        while True:
            if client.check([closed]):
                formed = Formed.loads(client.get(closed))
                return formed if self.member in formed.members else None
            arrivals = self.arrivals(n)
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
                return formed if self.member in formed.members else None
            if now > deadline:
                raise LiveError(
                    f"live mode: round {n} did not form within {join_timeout:.0f} s: "
                    f"{len(arrivals)} arrived, waiting for {_rounds.awaited(previous, arrivals, absent)} "
                    f"(at least {minimum} needed)"
                )
            time.sleep(self.poll)

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

    def only_newcomers(self, watch: Any, n: int, members: tuple[str, ...]) -> bool:
        """Whether round ``n``'s arrivals so far are all newcomers and no member of this round is marked gone
        (a scale-out or a replacement joining): then nothing is broken, and this round can end at a step's
        boundary. Any member's arrival (its collective failed) or gone mark is a fault: abort at once."""
        arrivals, unwritten = self.read_arrivals(watch, n)
        if unwritten or any(a.member in members for a in arrivals):
            return False
        return not any(watch.check([self.keys.gone(m)]) for m in members if m != self.member)


def connect(address: str) -> Any:
    """A client of the store at ``address`` (``host:port``)."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    host, _, port = address.rpartition(":")
    try:
        return TCPStore(host, int(port), is_master=False, timeout=STORE_TIMEOUT)
    except (RuntimeError, ValueError) as error:
        raise LiveError(
            f"live mode: cannot reach the store at {address} ({error}); set {contract.ENV_LIVE_STORE}=host:port"
        ) from error


def ended_here(member: str) -> bool:
    """A member of this host and pid namespace (the local runtime's pods, this pod's other workers) whose
    process is gone: absent at once, with no wait for its beats to go stale (``contract.Member.ended_here``)."""
    found = contract.Member.parse(member)
    return found is not None and found.ended_here()


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
