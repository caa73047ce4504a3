"""Live mode's membership, decided: which processes form the next round, in which rank order, at which step,
and who sends the state to whom. Pure: the store's contents in, a decision out (``trainguard.sdk.live`` reads
and writes the store).

A round closes when every member of the previous round has arrived or is known absent (its agent marked it
gone, or it has not beaten for the stale time), and at least ``minimum`` processes have arrived. A member of an
older incarnation of a pod than another member or arrival (the pod's generation, in the member's id) is stale:
it is absent, its arrival is not taken, and it stops itself (``superseded``): a node cut off may run an old
incarnation on while its replacement trains. The
survivors keep their order and come first, the newcomers follow in the order they arrived. The step is the
highest any arrival's state is at; the members holding it send it (the first of them alone writes its skeleton),
and every member behind it receives.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from trainguard.pod.contract import Member


@dataclass(frozen=True)
class Arrival:
    """A process that asks to be in a round: its id, the step its state is at (-1: it holds none)."""

    member: str
    step: int


@dataclass(frozen=True)
class Formed:
    """A closed round: its members in rank order, the step they agree on, and the transfer of the state."""

    round: int
    members: tuple[str, ...]
    step: int
    #: The member that sends the state at ``step``; None when no member holds a state (``step`` is then -1).
    source: str | None
    receivers: tuple[str, ...]

    def rank_of(self, member: str) -> int:
        return self.members.index(member)

    @property
    def holders(self) -> tuple[str, ...]:
        """The members whose state is at ``step`` (``source`` first): any of them can send it."""
        if self.source is None:
            return ()
        return tuple(m for m in self.members if m not in self.receivers)

    def dumps(self) -> str:
        return json.dumps(
            {
                "round": self.round,
                "members": list(self.members),
                "step": self.step,
                "source": self.source,
                "receivers": list(self.receivers),
            }
        )

    @classmethod
    def loads(cls, text: str | bytes) -> Formed:
        raw = json.loads(text)
        return cls(
            round=int(raw["round"]),
            members=tuple(raw["members"]),
            step=int(raw["step"]),
            source=raw["source"],
            receivers=tuple(raw["receivers"]),
        )


def superseded(members: Iterable[str]) -> set[str]:
    """The ``members`` whose pod has a newer incarnation among them (a higher generation in the member's id).
    Ids that are no member's (another version's) are never stale; the processes of one incarnation, whatever
    their number, are of the same generation."""
    parsed: dict[str, Member] = {}
    newest: dict[str, int] = {}
    for member in members:
        try:
            who = Member.parse(member)
        except ValueError:
            continue
        parsed[member] = who
        newest[who.pod] = max(newest.get(who.pod, who.generation), who.generation)
    return {member for member, who in parsed.items() if who.generation < newest[who.pod]}


def awaited(previous: tuple[str, ...], arrivals: list[Arrival], absent: set[str]) -> list[str]:
    """The previous round's members the next one still waits for: neither arrived nor known absent."""
    arrived = {a.member for a in arrivals}
    return [m for m in previous if m not in arrived and m not in absent]


def close(
    round_: int, previous: tuple[str, ...], arrivals: list[Arrival], absent: set[str], minimum: int
) -> Formed | None:
    """The round ``round_`` as it closes now, or None while it must wait (a previous member may still come, or
    fewer than ``minimum`` have arrived). An arrival listed twice counts once (its first record). Stale members
    (``superseded``) are absent, and their arrivals are not taken."""
    stale = superseded([*previous, *(a.member for a in arrivals)])
    if stale:
        absent = absent | (stale & set(previous))
        arrivals = [a for a in arrivals if a.member not in stale]
    if awaited(previous, arrivals, absent):
        return None
    first: dict[str, Arrival] = {}
    for arrival in arrivals:
        first.setdefault(arrival.member, arrival)
    if len(first) < max(minimum, 1):
        return None
    survivors = [m for m in previous if m in first]
    newcomers = [m for m in first if m not in set(previous)]
    members = tuple(survivors + newcomers)
    step = max(first[m].step for m in members)
    if step < 0:
        return Formed(round_, members, -1, None, ())
    source = next(m for m in members if first[m].step == step)
    receivers = tuple(m for m in members if first[m].step < step)
    return Formed(round_, members, step, source, receivers)


class Staleness:
    """Which members stopped beating: a member whose beat counter has not changed for ``after`` seconds of
    the observer's own clock (no two machines' clocks are compared). A member never seen beating counts from
    the observer's first look."""

    def __init__(self, after: float) -> None:
        self.after = after
        self._seen: dict[str, tuple[int | None, float]] = {}

    def stale(self, member: str, beat: int | None, now: float) -> bool:
        last = self._seen.get(member)
        if last is None or last[0] != beat:
            self._seen[member] = (beat, now)
            return False
        return now - last[1] >= self.after


class Lateness:
    """Whether the previous members that still beat but have not arrived are late: left out of the round as if
    stuck (in a device's kernel, a data loader). Their ``bound`` counts from the first previous member's arrival
    that the observer sees, not from its own: a newcomer that arrives alone never leaves out a survivor that
    beats (it would form a round that holds no state kept in memory, and take its step from disk); a survivor that
    stepped on more slowly than a collective's bound, on a loaded machine, is waited for by the newcomers."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self._since: float | None = None

    def late(self, previous: tuple[str, ...], arrivals: list[Arrival], now: float) -> bool:
        if self._since is None and any(a.member in previous for a in arrivals):
            self._since = now
        return self._since is not None and now - self._since > self.bound


#: Rounds of the same members that fail in a row, with no step completed between, before a member gives up.
MAX_FAILED_FORMATIONS = 3


@dataclass
class Failures:
    """When a member gives up: after ``MAX_FAILED_FORMATIONS`` rounds in a row failed with no step completed
    **and the same members**. A round whose members differ from the failed one's (a member lost, a newcomer, one
    started again by its launcher) is the fault being handled, not the same fault again: the count starts over.
    So a newcomer that dies before its first step, again and again (its launcher's restarts bound that), or
    that is slow to connect on a busy machine while others come and go, never makes the healthy members give up;
    a round of the same members that fails thrice (a script or a network that cannot work) does."""

    in_a_row: int = 0
    members: tuple[str, ...] | None = None

    def formed(self, members: tuple[str, ...]) -> None:
        if members != self.members:
            self.in_a_row = 0
            self.members = members

    def stepped(self) -> None:
        self.in_a_row = 0

    def failed(self) -> bool:
        """Counts a failed round of the members last formed; True when the member should give up."""
        self.in_a_row += 1
        return self.in_a_row >= MAX_FAILED_FORMATIONS
