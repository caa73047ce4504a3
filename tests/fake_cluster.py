"""An in-memory cluster that speaks the backend interface, for the controller's tests and the contract suite.

Nodes have a number of pod slots; launched pods wait to be scheduled on a Ready node with room (not on a node
the launch says to avoid), then start ``start_seconds`` later. Nothing happens on its own: time moves only
through ``advance`` and effects of ``apply`` show up at the next ``progress`` (``advance`` calls it), which
is how a real backend behaves (asynchronous, eventually consistent). Faults are injected by name: ``exit``,
``node_down``/``node_up``, ``force_delete``, ``evict``, ``hang``, ``stall`` (never starts), ``fail_launch``.

It keeps a log of every action it accepted, so a test can prove that nothing was done twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace

from trainguard.api import TrainingJob
from trainguard.controller.apply import apply_actions, in_order
from trainguard.controller.backend import (
    Action,
    ActionError,
    Applied,
    EmitEvent,
    IsolateNode,
    IsolationMode,
    LaunchPod,
    NotYet,
    NudgeSurvivors,
    Observed,
    ObservedNode,
    ObservedPhase,
    ObservedPod,
    ReleaseMode,
    ReleaseSurvivors,
    RestartInPlace,
    ScaleRequest,
    StatusConflict,
    TerminatePod,
    UpdateDiscovery,
    WriteStatus,
)
from trainguard.controller.launchspec import Network
from trainguard.controller.reports import AgentReport, LiveRound, WorkerRestart
from trainguard.controller.status import JobStatus
from trainguard.pod import checks
from trainguard.pod.summary import SuspectedHang
from trainguard.policy.fencing import Fencing


@dataclass
class FakeNode:
    name: str
    slots: int
    ready: bool = True


@dataclass
class FakePod:
    name: str
    role: str
    index: int
    generation: int
    avoid_nodes: tuple[str, ...] = ()
    phase: ObservedPhase = ObservedPhase.PENDING
    node: str | None = None
    scheduled_at: float | None = None
    started_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    terminating: bool = False
    overdue: bool = False
    address: str | None = None
    agent: AgentReport | None = None
    agent_missing: str | None = None
    ready: bool = True


@dataclass
class FakeCluster:
    """One job's view of a small cluster. ``now`` is the fake clock, in seconds."""

    nodes: dict[str, FakeNode]
    now: float = 0.0
    start_seconds: float = 0.0
    pods: dict[str, FakePod] = field(default_factory=dict)
    accepted: dict[str, Action] = field(default_factory=dict)
    #: Every action accepted, in order (repeats of a key are not in it).
    log: list[Action] = field(default_factory=list)
    errors: list[ActionError] = field(default_factory=list)
    scale_requests: list[ScaleRequest] = field(default_factory=list)
    stored: JobStatus | None = None
    discovery: tuple[str, ...] = ()
    #: Nudges of survivors asked for, in order.
    nudges: list[NudgeSurvivors] = field(default_factory=list)
    #: Releases of survivors asked for, in order; and whether this cluster offers them.
    releases: list[ReleaseSurvivors] = field(default_factory=list)
    #: Nodes isolated (``IsolateNode``): nothing is placed there again.
    isolated: set[str] = field(default_factory=set)
    #: Whose failed checks may isolate nodes here (``Observed.isolation``).
    isolation: IsolationMode = IsolationMode.AGENTS
    release: ReleaseMode = ReleaseMode.NONE
    #: Whether lost pods may run on unseen here (``Observed.fencing``; the operator's), and for how long.
    fencing: Fencing | None = None
    #: Where pods find each other, as ``observe`` reports it.
    network: Network = field(default_factory=Network)
    discovery_version: int = 0
    #: Pod names whose incarnations never get scheduled (a start timeout in the making).
    stalled: set[str] = field(default_factory=set)
    #: Pod names whose next launch the cluster refuses.
    refused: set[str] = field(default_factory=set)
    #: Pod names whose next launch has to wait (``NotYet``: an earlier pod of the name is still there).
    waiting: set[str] = field(default_factory=set)
    #: Pod names whose graceful removal never finishes (they stay terminating until removed by force).
    sticky: set[str] = field(default_factory=set)
    #: Pod names whose next incarnations are not Ready until the test says so (a sshd that does not answer).
    unready: set[str] = field(default_factory=set)
    _terminations: list[TerminatePod] = field(default_factory=list)
    _in_place: list[RestartInPlace] = field(default_factory=list)

    @classmethod
    def with_nodes(
        cls,
        count: int,
        slots: int = 1,
        *,
        now: float = 0.0,
        start_seconds: float = 0.0,
        network: Network | None = None,
    ) -> FakeCluster:
        nodes = {f"node-{i}": FakeNode(f"node-{i}", slots) for i in range(count)}
        return cls(nodes=nodes, now=now, start_seconds=start_seconds, network=network or Network())

    # ---- the backend interface --------------------------------------------------------------------

    def observe(self, job: TrainingJob) -> Observed:
        pods = tuple(
            ObservedPod(
                name=pod.name,
                role=pod.role,
                index=pod.index,
                generation=pod.generation,
                phase=pod.phase,
                node=pod.node,
                exit_code=pod.exit_code,
                signal=pod.signal,
                reason=pod.reason,
                started_at=pod.started_at,
                terminating=pod.terminating,
                overdue=pod.overdue,
                address=pod.address,
                agent=pod.agent,
                agent_missing=pod.agent_missing,
                ready=pod.ready,
            )
            for pod in sorted(self.pods.values(), key=lambda p: p.name)
        )
        nodes = tuple(
            ObservedNode(node.name, node.ready, node.slots - self._used(node.name))
            for node in self.nodes.values()
        )
        return Observed(
            pods,
            nodes,
            tuple(self.scale_requests),
            tuple(self.errors),
            self.network,
            self.release,
            isolated_nodes=frozenset(self.isolated),
            isolation=self.isolation,
            fencing=self.fencing,
        )

    def apply(self, job: TrainingJob, actions: Sequence[Action]) -> Applied:
        fresh = []
        for action in actions:
            if action.key in self.accepted:
                continue
            self.accepted[action.key] = action
            self.log.append(action)
            fresh.append(action)
        return apply_actions(_Verbs(self), fresh)

    def _launch(self, action: LaunchPod) -> None:
        if action.pod in self.refused:
            self.refused.discard(action.pod)
            raise Refused("the cluster refused the pod")
        if action.pod in self.waiting:
            self.waiting.discard(action.pod)
            raise NotYet(f"pod {action.pod}: an earlier pod of this name is still there")
        if action.pod in self.pods:
            raise Refused(f"pod {action.pod} already exists")
        self.pods[action.pod] = FakePod(
            action.pod, action.role, action.index, action.generation, action.avoid_nodes,
            ready=action.pod not in self.unready,
        )  # fmt: skip

    def _terminate(self, action: TerminatePod) -> None:
        pod = self.pods.get(action.pod)
        if pod is not None and pod.name in self.sticky and not action.force:
            pod.terminating = True  # never finishes by itself
            return
        self._terminations.append(action)

    def _write(self, action: WriteStatus) -> None:
        if self.stored is not None and self.stored.revision >= action.status.revision:
            raise StatusConflict(f"stored revision {self.stored.revision} is not older")
        self.stored = action.status

    # ---- time -------------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.progress()

    def progress(self) -> None:
        """Carry out what was applied and what time allows: removals, restarts in place, scheduling, starts."""
        for action in self._terminations:
            pod = self.pods.get(action.pod)
            if pod is not None and pod.generation == action.generation:
                del self.pods[action.pod]
        self._terminations.clear()
        for restart in self._in_place:
            pod = self.pods.get(restart.pod)
            if pod is not None and pod.generation == restart.generation:
                progress = pod.agent.last_progress_at if pod.agent else None
                pod.agent = AgentReport(restart.attempt, hung=False, last_progress_at=progress)
        self._in_place.clear()
        for pod in sorted(self.pods.values(), key=lambda p: p.name):
            if pod.phase is ObservedPhase.PENDING and pod.node is None and pod.name not in self.stalled:
                self._schedule(pod)
            started = pod.scheduled_at is not None and self.now >= pod.scheduled_at + self.start_seconds
            if pod.phase is ObservedPhase.PENDING and started:
                pod.phase, pod.started_at = ObservedPhase.RUNNING, self.now

    def _schedule(self, pod: FakePod) -> None:
        for node in self.nodes.values():
            if (
                node.ready
                and node.name not in pod.avoid_nodes
                and node.name not in self.isolated
                and self._used(node.name) < node.slots
            ):
                pod.node, pod.scheduled_at = node.name, self.now
                return

    def _used(self, node: str) -> int:
        return sum(1 for pod in self.pods.values() if pod.node == node)

    # ---- faults and requests ------------------------------------------------------------------------

    def exit(self, pod: str, code: int, *, reason: str | None = None, signal: int | None = None) -> None:
        target = self.pods[pod]
        target.phase = ObservedPhase.SUCCEEDED if code == 0 and signal is None else ObservedPhase.FAILED
        target.exit_code, target.reason, target.signal = code, reason, signal

    def node_down(self, node: str) -> None:
        self.nodes[node].ready = False

    def node_up(self, node: str) -> None:
        self.nodes[node].ready = True

    def add_node(self, name: str, slots: int = 1) -> None:
        self.nodes[name] = FakeNode(name, slots)

    def without_agent(self, pod: str, why: str) -> None:
        """The pod's image cannot run the agent (its probe said ``why``)."""
        self.pods[pod].agent_missing = why

    def force_delete(self, pod: str) -> None:
        del self.pods[pod]

    def evict(self, pod: str) -> None:
        target = self.pods[pod]
        target.phase, target.reason = ObservedPhase.FAILED, "Evicted"

    def check_fails(self, pod: str, phase: str = "pre", item: str = "gpu.ecc", value: float = 2.0) -> None:
        """The pod's agent checked its node (``phase``) and ``item`` read ``value``, past its threshold: the pod
        ends as the agent ends it (exit 120, reason HardwareFault, or PreCheckFailed for an environment item)."""
        spec = checks.ITEMS[item]
        result = checks.CheckResult(
            phase, self.now, 0.5, (checks.CheckItem(item, spec.verdict, value, spec.default, "read"),)
        )
        target = self.pods[pod]
        target.agent = replace(target.agent or AgentReport(), last_check=result, failed_check=result)
        hardware = spec.verdict == checks.HARDWARE
        self.exit(
            pod,
            checks.EXIT_CHECK_FAILED,
            reason=checks.REASON_HARDWARE if hardware else checks.REASON_PRE_CHECK,
        )

    def check_passes(self, pod: str, phase: str = "post") -> None:
        """The pod's agent checked its node and every item passed."""
        result = checks.CheckResult(phase, self.now, 0.5, (checks.CheckItem("gpu.ecc", checks.OK, 0.0, 0.0),))
        target = self.pods[pod]
        target.agent = replace(target.agent or AgentReport(), last_check=result)

    def hang(self, pod: str) -> None:
        target = self.pods[pod]
        target.agent = replace(target.agent or AgentReport(), hung=True)

    def restart_workers(self, pod: str, exit_code: int, *, keep: int | None = None) -> None:
        """torchrun in the pod restarted its failed workers (the pod goes on); the agent says so, keeping only
        its latest ``keep`` restarts when given."""
        target = self.pods[pod]
        agent = target.agent or AgentReport()
        restarts = (*agent.worker_restarts, WorkerRestart(self.now, exit_code, rank=0))
        start = agent.worker_restarts_from
        if keep is not None and len(restarts) > keep:
            start += len(restarts) - keep
            restarts = restarts[-keep:]
        target.agent = replace(agent, worker_restarts=restarts, worker_restarts_from=start)

    def reform(self, pod: str, *rounds: LiveRound, keep: int | None = None) -> None:
        """The pod's live workers formed ``rounds`` (the pod goes on); its agent says so, keeping only its
        latest ``keep`` rounds when given."""
        target = self.pods[pod]
        agent = target.agent or AgentReport()
        kept = (*agent.live_rounds, *rounds)
        start = agent.live_rounds_from
        if keep is not None and len(kept) > keep:
            start += len(kept) - keep
            kept = kept[-keep:]
        target.agent = replace(agent, live_rounds=kept, live_rounds_from=start)

    def live_unused(self, pod: str) -> None:
        """A worker of the pod ended before it formed any live round."""
        target = self.pods[pod]
        target.agent = replace(target.agent or AgentReport(), live_unused=True)

    def suspect_hang(self, pod: str, signal: str | None = "io", idle_seconds: float = 60.0) -> None:
        """The pod's agent, detecting only, suspects a hang (``None`` signal: it no longer does)."""
        target = self.pods[pod]
        suspected = None if signal is None else SuspectedHang(signal, idle_seconds)
        target.agent = replace(target.agent or AgentReport(), suspected_hang=suspected)

    def report_progress(self, pod: str) -> None:
        target = self.pods[pod]
        target.agent = replace(target.agent or AgentReport(), hung=False, last_progress_at=self.now)

    def stall(self, pod: str) -> None:
        self.stalled.add(pod)

    def unstall(self, pod: str) -> None:
        self.stalled.discard(pod)

    def fail_launch(self, pod: str) -> None:
        self.refused.add(pod)

    def scale(self, role: str, replicas: int) -> str:
        request = ScaleRequest(f"scale-{len(self.scale_requests) + 1}", role, replicas, self.now)
        self.scale_requests.append(request)
        return request.id

    # ---- what happened ----------------------------------------------------------------------------

    def launches(self) -> list[LaunchPod]:
        return [a for a in self.log if isinstance(a, LaunchPod)]

    def events(self) -> list[EmitEvent]:
        return [a for a in self.log if isinstance(a, EmitEvent)]

    def running(self, role: str | None = None) -> list[str]:
        return sorted(
            p.name
            for p in self.pods.values()
            if p.phase is ObservedPhase.RUNNING and (role is None or p.role == role)
        )

    def names(self) -> Iterable[str]:
        return sorted(self.pods)


class Refused(Exception):
    """The fake cluster cannot carry the action out."""


class _Verbs:
    """The fake cluster's hands (``trainguard.controller.apply``)."""

    failures: tuple[type[Exception], ...] = (Refused,)
    side_by_side = staticmethod(in_order)

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def now(self) -> float:
        return self.cluster.now

    def keep_error(self, error: ActionError) -> None:
        self.cluster.errors.append(error)

    def batch(self, actions: Sequence[Action]) -> AbstractContextManager[object]:
        return nullcontext()

    def before_launches(self) -> None:
        pass

    def beside_launches(self) -> Sequence[Callable[[], None]]:
        return ()

    def launch(self, action: LaunchPod) -> None:
        self.cluster._launch(action)

    def terminate(self, action: TerminatePod) -> None:
        self.cluster._terminate(action)

    def restart_in_place(self, action: RestartInPlace) -> None:
        self.cluster._in_place.append(action)

    def nudge(self, action: NudgeSurvivors) -> None:
        self.cluster.nudges.append(action)  # no processes to restart: what was asked is kept

    def release(self, action: ReleaseSurvivors) -> None:
        self.cluster.releases.append(action)  # no connections to close: what was asked is kept

    def isolate_node(self, action: IsolateNode) -> None:
        self.cluster.isolated.add(action.node)

    def update_discovery(self, action: UpdateDiscovery) -> None:
        if action.version > self.cluster.discovery_version:
            self.cluster.discovery, self.cluster.discovery_version = action.hosts, action.version

    def emit_event(self, action: EmitEvent) -> None:
        pass  # kept in the log

    def write_status(self, action: WriteStatus) -> None:
        self.cluster._write(action)
