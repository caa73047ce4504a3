"""Bad nodes: a share of the GPU nodes whose hardware is faulty, and what the fault tolerance check makes of them.

A bad node fails the job's pod on it again and again: exponential times between failures of mean
``mtbf_hours`` (3 h by default) while a pod of the job runs there, on top of the failures every node has.
A failure is a crash of the training process (70 %) or a hang (a GPU fallen off the bus, a stuck collective:
30 %). Drawn as one Poisson process over the bad nodes (rate bad nodes / MTBF) that picks one at random; a
failure that picks a bad node without a running pod of the job costs nothing.

With the job's check on (``trainguard.policy.faultcheck.enabled``), the simulated agent checks as the real one
does (docs/faultcheck.md):
- ``pre``: a pod that starts on a bad node the pre-check finds (``precheck_finds`` of them; the rest fail only
  now and then, which a pre-check misses) ends ``check_seconds`` later with ``HardwareFault``, its command
  never run;
- ``post``: a crash on a bad node is found by the post-check: the pod ends with ``HardwareFault`` after the
  exit is seen and the check has run;
- ``periodic``: a hang on a bad node is found by the next periodic check (uniform within the job's
  ``faultCheck.periodSeconds``; with no periodic check, after the hang is seen, by the post-check).
The controller then issues the pod again off its node and isolates the node (``IsolateNode``), within the
job's bounds. With the check off, the same failures are plain crashes and hangs (``Engine.fail``), decided by
the job's restart policy, and a replacement may land on a bad node again.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from trainguard.backends.sim.clock import VirtualClock
from trainguard.backends.sim.engine import Engine
from trainguard.backends.sim.failures import Failure, FailureKind, drawn
from trainguard.backends.sim.pods import SimPod
from trainguard.controller import ObservedPhase
from trainguard.pod.checks import HARDWARE, PERIODIC, POST, PRE, CheckItem, CheckResult
from trainguard.policy.faultcheck import enabled, policy_of

HOUR = 3600.0
#: Failures of a bad node that hang the process rather than crash it.
HANG_SHARE = 0.3
#: What the simulated agent's check finds on a bad node: an uncorrectable ECC error.
_FOUND = CheckItem(
    "gpu.ecc", HARDWARE, value=1.0, threshold=0.0, detail="uncorrectable ECC error (simulated)"
)


@dataclass(frozen=True)
class BadNodeSettings:
    #: Share of the GPU nodes that are bad (0: none; the count is rounded, at least one when above 0).
    share: float = 0.0
    #: Mean hours between failures of a bad node while a pod of the job runs there.
    mtbf_hours: float = 3.0
    #: Share of the bad nodes whose fault a pre-check finds before the command starts.
    precheck_finds: float = 1.0
    #: How long one check takes.
    check_seconds: float = 5.0

    def __post_init__(self) -> None:
        wrong = [
            name
            for name, ok in (
                ("bad_node_share", 0 <= self.share <= 1),
                ("bad_mtbf_hours", self.mtbf_hours > 0),
                ("bad_precheck_finds", 0 <= self.precheck_finds <= 1),
                ("check_seconds", self.check_seconds >= 0),
            )
            if not ok
        ]
        if wrong:
            raise ValueError(f"out of range: {', '.join(wrong)}")

    def count(self, nodes: int) -> int:
        return 0 if self.share <= 0 else max(1, round(self.share * nodes))


@dataclass
class BadNodes:
    """The bad nodes of one run and the failures they cause (``install`` puts them on an engine)."""

    engine: Engine
    settings: BadNodeSettings
    #: The bad nodes, and those whose fault a pre-check finds.
    nodes: tuple[str, ...]
    found_before: frozenset[str]
    rng: random.Random
    #: Failures that hit a running pod of the job: "pre", "post", "periodic" (found by a check) or "plain".
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def checked(self) -> bool:
        return enabled(self.engine.job)

    def on_start(self, pod: SimPod) -> None:
        """The pre-check of a pod that starts running."""
        if pod.node in self.found_before and pod.role == self.engine.worker_role and self.checked:
            self._hit(PRE, pod.node, FailureKind.CRASH, self.settings.check_seconds)

    def fail(self, node: str) -> None:
        pod = self.engine.cluster.pod_on(node)
        if pod is None or pod.phase is not ObservedPhase.RUNNING:
            return
        kind = FailureKind.HANG if self.rng.random() < HANG_SHARE else FailureKind.CRASH
        if not self.checked:
            before = len(self.engine.faults)
            self.engine.fail(node, kind)
            self.counts["plain"] += len(self.engine.faults) - before
            return
        timing, period = self.engine.timing, policy_of(self.engine.job).period_seconds
        if kind is FailureKind.CRASH:
            self._hit(POST, node, kind, timing.crash_detect + self.settings.check_seconds)
        elif period > 0:
            self._hit(PERIODIC, node, kind, self.rng.uniform(0, period) + self.settings.check_seconds)
        else:
            self._hit(POST, node, kind, timing.collective_timeout + self.settings.check_seconds)

    def _hit(self, phase: str, node: str, kind: FailureKind, delay: float) -> None:
        before = len(self.engine.faults)
        at = self.engine.now + delay
        found = CheckResult(phase, at, self.settings.check_seconds, (_FOUND,))
        self.engine.check_fault(node, kind, found, delay)
        self.counts[phase] += len(self.engine.faults) - before


def install(
    engine: Engine, gpu_nodes: Sequence[str], settings: BadNodeSettings, seed: int, horizon: float
) -> BadNodes | None:
    """Choose the bad nodes (from ``seed``), hook the pre-check and schedule their failures; None if none."""
    count = settings.count(len(gpu_nodes))
    if count == 0:
        return None
    rng = random.Random(f"bad-nodes-{seed}")
    chosen = tuple(sorted(rng.sample(list(gpu_nodes), count)))
    finds = frozenset(node for node in chosen if rng.random() < settings.precheck_finds)
    bad = BadNodes(engine, settings, chosen, finds, rng)
    engine.cluster.on_start = bad.on_start
    failures = drawn(rng, count, settings.mtbf_hours * HOUR, {FailureKind.CRASH: 1.0}, horizon)
    _feed(engine.cluster.clock, bad, failures)
    return bad


def _feed(clock: VirtualClock, bad: BadNodes, failures: Iterator[Failure]) -> None:
    """Schedule the failures one at a time (the heap stays small)."""

    def next_one() -> None:
        failure = next(failures, None)
        if failure is not None:
            clock.at(failure.at, lambda: happen(failure))

    def happen(failure: Failure) -> None:
        bad.fail(bad.nodes[failure.node])
        next_one()

    next_one()
