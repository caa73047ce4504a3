"""Live mode's watchdog: a thread of each member's own that beats for it on the job's store and ends the
member's round at once when the round is broken (``trainguard.sdk.live`` carries out what it finds):

- a member of the round arrived in the next one (its collective failed), or one of them is marked gone (its
  launcher or agent saw its process end): a fault, the round is aborted now;
- a member of the round stopped beating for ``stale_after`` seconds (a pod whose processes are frozen, a node
  that dropped off the network: no connection is reset, and the collectives would wait for their bound): a
  fault, the round is aborted now, and the next round counts that member absent at once (``silent``). Unless
  the round's members all completed a collective within those seconds (``heard_from_all``: the agreement
  before each optimizer step): then each of them is alive, and only its beats are late (its connection to
  the store was cut, say when the store's pod was re-created, and it has not noticed yet);
- only newcomers arrived (a scale-out, a replacement): nothing is broken; the round ends at the next step's
  boundary (``join_pending``), or ``join_within`` seconds later for a loop that seldom completes a step.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from trainguard.pod.contract import LiveKeys
from trainguard.sdk._rounds import Staleness
from trainguard.sdk._roundstore import RoundStore

#: A member beats (a counter in the store) this often, and the watchdog looks at the others' beats as often.
BEAT_EVERY = 0.25


class Watchdog:
    """What one member's watchdog thread sees; ``abort(why)`` ends the member's round (from this thread)."""

    def __init__(
        self,
        watch: Any,
        rounds: RoundStore,
        keys: LiveKeys,
        member: str,
        *,
        poll: float,
        stale_after: float,
        join_within: float,
        abort: Callable[[str], None],
    ) -> None:
        self.watch = watch
        self.rounds = rounds
        self.keys = keys
        self.member = member
        self.poll = poll
        self.stale_after = stale_after
        self.join_within = join_within
        self.abort = abort
        #: The round watched and its members (``watching``); the round is broken once ``broken`` is set.
        self.round = 0
        self.members: tuple[str, ...] = ()
        self.broken = threading.Event()
        #: A newcomer waits in the next round (the training thread leaves at the step's end).
        self.join_pending = threading.Event()
        #: The members found silent: the next round does not wait for them.
        self.silent: set[str] = set()
        self.stop = threading.Event()
        self._silence = Staleness(stale_after)
        #: When every member of the round last completed a collective with this one (monotonic); None: not yet.
        self.together_at: float | None = None
        self._thread = threading.Thread(target=self._run, name="trainguard-live", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def watching(self, round_: int, members: tuple[str, ...]) -> None:
        """A round formed: watch its members from now on (their beats seen anew)."""
        self.members = members
        self._silence = Staleness(self.stale_after)
        self.silent.clear()
        self.join_pending.clear()
        self.round = round_
        self.together_at = None
        self.broken.clear()

    def heard_from_all(self) -> None:
        """The training thread completed a collective in which every member of the round took part."""
        self.together_at = time.monotonic()

    def found_silent(self, now: float) -> list[str]:
        """The round's members silent by their beats (``RoundStore.silent``), none while they all completed a
        collective with this member within the stale time: a member that takes part in them is alive."""
        found = self.rounds.silent(self.watch, self.members, self._silence, now)
        together = self.together_at
        if found and together is not None and now - together < self.stale_after:
            return []
        return found

    def _run(self) -> None:
        next_beat = next_look = pending_since = 0.0
        while not self.stop.wait(self.poll):
            with contextlib.suppress(
                Exception
            ):  # a store that does not answer now: the next poll tries again
                now = time.monotonic()
                if now >= next_beat:
                    self.watch.add(self.keys.beat(self.member), 1)
                    next_beat = now + BEAT_EVERY
                watched, members = self.round, self.members
                if not watched or self.broken.is_set():
                    continue
                if self.watch.check([self.keys.arrivals(watched + 1)]):
                    if self.rounds.only_newcomers(self.watch, watched + 1, members):
                        if not self.join_pending.is_set():
                            self.join_pending.set()
                            pending_since = now
                        elif now - pending_since > self.join_within:
                            self._abort(watched, f"a newcomer waited {self.join_within:g} s for a step's end")
                    else:
                        self._abort(watched, "a member left the round")
                    continue
                if now >= next_look:
                    next_look = now + BEAT_EVERY
                    silent = self.found_silent(now)
                    if silent:
                        self.silent.update(silent)
                        self._abort(watched, f"{', '.join(silent)} silent for {self.stale_after:g} s")

    def _abort(self, watched: int, why: str) -> None:
        """Aborts the round ``watched``, unless the next round is watched meanwhile (what was found is of the
        round before, which this member has left)."""
        if self.round == watched:
            self.abort(why)
