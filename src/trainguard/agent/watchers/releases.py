"""Releases: a lost peer's addresses; this pod's processes' connections to it are shut down at once, its
peers' quiet ones ``QUIET_SECONDS`` later, and connection attempts to it while it is held
(``trainguard.agent.release``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from trainguard.agent.release import (
    QUIET_SECONDS,
    Held,
    Release,
    ReleaseWatch,
    release_connections,
    release_lost,
)
from trainguard.agent.report import Reporter
from trainguard.agent.sockets import Released
from trainguard.agent.watchers.base import Tick
from trainguard.pod import contract


class ReleaseWatcher:
    def __init__(
        self, path: Path, reporter: Reporter, say: Callable[[str], None], clock: Callable[[], float]
    ) -> None:
        self.watch = ReleaseWatch(path)  # as the nudges': a loss known at start is old news
        self.reporter = reporter
        self.say = say
        self.clock = clock
        #: The lost addresses released lately: their unanswered connection attempts are shut down too.
        self.held = Held()
        #: The last release's token (what the held addresses' reports name), and the refusals said already.
        self.held_token = ""
        self.held_refusals: set[str] = set()
        #: The command's latest start, for the reports (a release's later part is reported from a thread).
        self.attempt = 0

    def start(self, now: float) -> None:
        pass

    def poll(self, tick: Tick) -> None:
        self.attempt = tick.attempt
        release = self.watch.poll()
        if release is not None:
            self._release(release)
        if self.held.addresses:
            self._release_attempts(tick.now)

    def _release(self, release: Release) -> None:
        """The lost pod's connections now, with the peers' where this pod is still in the lost pod's round
        (``release_lost``); the peers' quiet ones ``QUIET_SECONDS`` later, in a thread of their own so that
        supervision goes on meanwhile."""
        done = release_lost(release.addresses, release.peers)
        self._released(release.token, release.addresses, done)
        self.held.hold(release.addresses, self.clock())
        self.held_token = release.token
        if release.peers:

            def later() -> None:
                time.sleep(QUIET_SECONDS)
                quiet = release_connections((), release.peers, quiet=QUIET_SECONDS)
                self._released(release.token, release.peers, quiet, quiet_peers=True)

            threading.Thread(target=later, name="trainguard-release", daemon=True).start()

    def _release_attempts(self, now: float) -> None:
        """The held addresses' connection attempts that go unanswered (``trainguard.agent.release.Held``);
        said only when some were shut down, or for a refusal not said before."""
        held = self.held.addresses
        done = self.held.release(now)
        refused = [reason for reason in done.refused if reason not in self.held_refusals]
        self.held_refusals.update(refused)
        if done.count or refused:
            done.refused = refused
            self._released(self.held_token, held, done, attempts=True)

    def _released(
        self,
        token: str,
        to: tuple[str, ...],
        done: Released,
        *,
        attempts: bool = False,
        quiet_peers: bool = False,
    ) -> None:
        """Report and say what a release did (``attempts``: to the held addresses' connection attempts;
        ``quiet_peers``: to the peers' quiet connections, ``QUIET_SECONDS`` after)."""
        self.reporter.event(
            contract.REPORT_RELEASED,
            pid=None,
            attempt=self.attempt,
            token=token,
            addresses=list(to),
            sockets=done.count,
            peer_sockets=0 if quiet_peers else done.peer_sockets,
            refused=done.refused,
            **({"attempts": True} if attempts else {}),
        )
        where = ", ".join(to)
        what = "unanswered connection attempt(s)" if attempts else "connection(s)"
        if done.count:
            pids = ", ".join(f"{pid} ({n})" for pid, n in sorted(done.sockets.items()))
            together = (
                f" ({done.peer_sockets} to the peers with them: this pod left the lost pod's round with them)"
                if done.peer_sockets and not quiet_peers
                else ""
            )
            self.say(f"release {token}: shut down {done.count} {what} to {where}, of {pids}{together}")
        else:
            self.say(f"release {token}: no connection to {where} to shut down")
        if done.refused:
            self.say(f"release {token}: some could not be shut down: {'; '.join(done.refused)}")
