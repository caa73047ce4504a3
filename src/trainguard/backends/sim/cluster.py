"""The simulated cluster: nodes with one pod slot each, pods placed on them, and the backend interface
(``trainguard.controller.Backend``) over them, on a virtual clock.

- Nodes belong to a pool (``gpu`` for the workers, ``cpu`` for launchers and other small roles); a pod goes to
  the first free node of its role's pool that is Ready, alive, and not one its launch says to avoid (until
  that node is repaired). A pod that finds none waits, Pending without a node, until one frees up (waiting
  for capacity).
- Launched pods run ``start_seconds`` plus their share of the creation throughput later: the ``k`` pods of
  one ``apply`` are all Running after ``k / launch_rate`` seconds (a relaunch of 2,048 pods is not instant).
- A pod whose process still runs takes ``stop_seconds`` to go when removed (SIGTERM, then the grace period:
  a training process stuck in a collective does not stop sooner), and as long to be restarted in place; a pod
  that has ended, or one removed by force, goes at once. Status writes take effect at once; every effect
  shows in the next ``observe()``. Actions are idempotent by key (the latest keys are remembered, more than the controller
  ever keeps).
- A node can be lost before anyone notices: ``node_lost`` takes it away (nothing is placed on it any more)
  while it still reads Ready; ``node_down`` is the moment the control plane sees it NotReady.

``observe()`` lists every pod of the job, and of the nodes only those the controller can use: NotReady nodes
(where its pods were lost) and Ready nodes with room (where a role can grow back). A node left out is Ready
and full, which is what the controller assumes of a node it does not find. Both lists are kept up to date
as things change, so observing a job of thousands of pods costs next to nothing.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from trainguard.api import TrainingJob
from trainguard.backends.sim.clock import VirtualClock
from trainguard.backends.sim.pods import GPU_POOL, SimNode, SimPod
from trainguard.controller import (
    Action,
    ActionError,
    AgentReport,
    Applied,
    EmitEvent,
    IsolateNode,
    JobStatus,
    LaunchPod,
    NudgeSurvivors,
    Observed,
    ObservedNode,
    ObservedPhase,
    ObservedPod,
    ReleaseSurvivors,
    RestartInPlace,
    ScaleRequest,
    StatusConflict,
    TerminatePod,
    UpdateDiscovery,
    WriteStatus,
)
from trainguard.controller.apply import apply_actions, in_order
from trainguard.pod.checks import CheckResult

#: Action keys remembered for idempotency (the controller itself keeps far fewer).
MAX_KEYS = 200_000
#: Events kept for a view of the job; older ones are only counted.
MAX_EVENTS = 500


@dataclass
class SimCluster:
    clock: VirtualClock
    nodes: dict[str, SimNode]
    #: role name -> pool its pods run in (roles not listed: the gpu pool).
    role_pools: Mapping[str, str] = field(default_factory=dict)
    start_seconds: float = 0.0
    #: Pods created per second (None: no limit).
    launch_rate: float | None = None
    #: How long a running process takes to stop.
    stop_seconds: float = 0.0
    pods: dict[str, SimPod] = field(default_factory=dict)
    errors: list[ActionError] = field(default_factory=list)
    scale_requests: list[ScaleRequest] = field(default_factory=list)
    stored: JobStatus | None = None
    discovery: tuple[str, ...] = ()
    #: Nudges of survivors asked for, in order.
    nudges: list[NudgeSurvivors] = field(default_factory=list)
    releases: list[ReleaseSurvivors] = field(default_factory=list)
    #: Nodes isolated by fault tolerance checks.
    isolated: set[str] = field(default_factory=set)
    events_total: int = 0
    recent_events: deque[EmitEvent] = field(default_factory=lambda: deque(maxlen=MAX_EVENTS))
    #: Bumped by every change a later observe() would show.
    version: int = 0
    _accepted: OrderedDict[str, None] = field(default_factory=OrderedDict)
    #: pool -> Ready, alive nodes without a pod, in the order they became free.
    _free: dict[str, dict[str, None]] = field(default_factory=dict)
    #: Pods waiting for a node, oldest first.
    _unplaced: dict[str, None] = field(default_factory=dict)
    _observed: dict[str, ObservedPod] = field(default_factory=dict)
    #: Pods not running, or running but hung (so that "is everyone fine?" is a set operation).
    _unhealthy: set[str] = field(default_factory=set)
    _pods_view: tuple[ObservedPod, ...] | None = None
    _nodes_view: tuple[ObservedNode, ...] | None = None
    #: Called as each pod starts running (the simulated agent's pre-check).
    on_start: Callable[[SimPod], None] | None = None

    def __post_init__(self) -> None:
        for node in self.nodes.values():
            self._update_free(node)

    @classmethod
    def build(
        cls,
        clock: VirtualClock,
        pools: Mapping[str, int],
        role_pools: Mapping[str, str] | None = None,
        *,
        start_seconds: float = 0.0,
        launch_rate: float | None = None,
        stop_seconds: float = 0.0,
    ) -> SimCluster:
        """A cluster with ``pools[pool]`` nodes per pool, named ``<pool>-<i>`` (``node-<i>`` for gpu)."""
        nodes: dict[str, SimNode] = {}
        for pool, size in pools.items():
            prefix = "node" if pool == GPU_POOL else pool
            width = len(str(max(size - 1, 0)))
            for i in range(size):
                name = f"{prefix}-{i:0{width}d}"
                nodes[name] = SimNode(name, pool)
        return cls(
            clock=clock,
            nodes=nodes,
            role_pools=dict(role_pools or {}),
            start_seconds=start_seconds,
            launch_rate=launch_rate,
            stop_seconds=stop_seconds,
        )

    @property
    def now(self) -> float:
        return self.clock.now

    # ---- the backend interface --------------------------------------------------------------------

    def observe(self, job: TrainingJob) -> Observed:
        if self._pods_view is None:
            self._pods_view = tuple(self._observed.values())
        if self._nodes_view is None:
            self._nodes_view = self._usable_nodes()
        return Observed(
            self._pods_view,
            self._nodes_view,
            tuple(self.scale_requests),
            tuple(self.errors),
            node_count=len(self.nodes),
            isolated_nodes=frozenset(self.isolated),
        )

    def apply(self, job: TrainingJob, actions: Sequence[Action]) -> Applied:
        fresh = [action for action in actions if self._accept(action.key)]
        return apply_actions(SimVerbs(self), fresh)

    def _accept(self, key: str) -> bool:
        """True the first time a key is seen (idempotency by key)."""
        if key in self._accepted:
            return False
        self._accepted[key] = None
        if len(self._accepted) > MAX_KEYS:
            self._accepted.popitem(last=False)
        return True

    def _gone(self, pod: SimPod) -> None:
        if self.pods.get(pod.name) is pod:
            self._remove(pod)

    def _rerun(self, pod: SimPod, attempt: int) -> None:
        """The agent stopped the process and started the command again in the same pod."""
        if self.pods.get(pod.name) is not pod:
            return
        progress = pod.agent.last_progress_at if pod.agent is not None else None
        pod.agent = AgentReport(attempt, hung=False, last_progress_at=progress)
        self._show(pod)

    # ---- placement --------------------------------------------------------------------------------

    def place(self, pods: Iterable[SimPod]) -> None:
        """Put waiting pods on free nodes; the ones placed together start together."""
        placed = [pod for pod in pods if pod.name in self._unplaced and self._bind(pod)]
        if not placed:
            return
        delay = self.start_seconds + (len(placed) / self.launch_rate if self.launch_rate else 0.0)
        if delay <= 0:
            self._start(placed)
        else:
            self.clock.at(self.now + delay, lambda: self._start(placed))

    def _bind(self, pod: SimPod) -> bool:
        free = self._free.get(pod.pool, {})
        name = next((n for n in free if n not in pod.avoid), None)
        if name is None:
            return False
        node = self.nodes[name]
        node.pod = pod.name
        del free[name]
        del self._unplaced[pod.name]
        pod.node = name
        self._show(pod)
        self._nodes_view = None
        return True

    def _start(self, pods: Sequence[SimPod]) -> None:
        for pod in pods:
            if self.pods.get(pod.name) is pod and pod.phase is ObservedPhase.PENDING:
                pod.phase, pod.started_at = ObservedPhase.RUNNING, self.now
                self._show(pod)
                if self.on_start is not None:
                    self.on_start(pod)

    def _retry_unplaced(self) -> None:
        if self._unplaced:
            self.place([self.pods[name] for name in list(self._unplaced)])

    def _update_free(self, node: SimNode) -> None:
        free = self._free.setdefault(node.pool, {})
        if node.ready and node.alive and not node.cordoned and not node.isolated and node.pod is None:
            free.setdefault(node.name, None)
        else:
            free.pop(node.name, None)
        self._nodes_view = None

    def _usable_nodes(self) -> tuple[ObservedNode, ...]:
        down = [ObservedNode(n.name, False, 0) for n in self.nodes.values() if not n.ready]
        free = [ObservedNode(name, True, 1) for pool in self._free.values() for name in pool]
        return (*down, *free)

    # ---- changes ------------------------------------------------------------------------------------

    def _show(self, pod: SimPod) -> None:
        self._observed[pod.name] = pod.observed()
        hung = pod.agent is not None and pod.agent.hung
        if pod.phase is ObservedPhase.RUNNING and not hung:
            self._unhealthy.discard(pod.name)
        else:
            self._unhealthy.add(pod.name)
        self.changed()

    def changed(self) -> None:
        self._pods_view = None
        self.version += 1

    def _remove(self, pod: SimPod) -> None:
        del self.pods[pod.name]
        del self._observed[pod.name]
        self._unhealthy.discard(pod.name)
        self._unplaced.pop(pod.name, None)
        self.changed()
        if pod.node is not None:
            node = self.nodes[pod.node]
            if node.pod == pod.name:
                node.pod = None
                self._update_free(node)
                self._retry_unplaced()

    # ---- what happens to pods and nodes (faults, requests) --------------------------------------------

    def exit(self, pod: str, code: int, reason: str | None = None, check: CheckResult | None = None) -> None:
        """The pod's container ends with ``code`` (0: it succeeded); ``check``: the agent's failed check."""
        target = self.pods[pod]
        if check is not None:
            target.agent = replace(target.agent or AgentReport(), last_check=check, failed_check=check)
        target.phase = ObservedPhase.SUCCEEDED if code == 0 else ObservedPhase.FAILED
        target.exit_code, target.reason = code, reason
        self._show(target)

    def evict(self, pod: str) -> None:
        self.exit(pod, 143, reason="Evicted")

    def hang(self, pod: str) -> None:
        """The agent in the pod reports no progress for its hang timeout."""
        target = self.pods[pod]
        target.agent = replace(target.agent or AgentReport(), hung=True)
        self._show(target)

    def report_progress(self, pod: str) -> None:
        target = self.pods[pod]
        target.agent = replace(target.agent or AgentReport(), hung=False, last_progress_at=self.now)
        self._show(target)

    def force_delete(self, pod: str) -> None:
        self._remove(self.pods[pod])

    def node_lost(self, node: str) -> None:
        """The machine is gone; the control plane does not know yet."""
        self.nodes[node].alive = False
        self._update_free(self.nodes[node])

    def node_down(self, node: str) -> None:
        """The control plane sees the node NotReady (its pods stay listed, as on Kubernetes)."""
        target = self.nodes[node]
        target.alive = target.ready = False
        self._update_free(target)
        self.changed()

    def node_up(self, node: str) -> None:
        """The node is back (repaired): Ready, and no longer avoided by pods that lost it."""
        target = self.nodes[node]
        if target.pod is not None and target.pod not in self.pods:
            target.pod = None
        target.alive = target.ready = True
        self._back(target)

    def cordon(self, node: str) -> None:
        self.nodes[node].cordoned = True
        self._update_free(self.nodes[node])

    def isolate(self, node: str) -> None:
        """Nothing is placed on ``node`` again (a fault tolerance check found its hardware faulty)."""
        target = self.nodes.get(node)
        if target is None:
            return
        target.isolated = True
        self.isolated.add(node)
        self._update_free(target)

    def uncordon(self, node: str) -> None:
        target = self.nodes[node]
        target.cordoned = False
        self._back(target)

    def _back(self, node: SimNode) -> None:
        for name in self._unplaced:
            pod = self.pods[name]
            if node.name in pod.avoid:
                pod.avoid = tuple(other for other in pod.avoid if other != node.name)
        self._update_free(node)
        self._retry_unplaced()

    def scale(self, role: str, replicas: int) -> str:
        request = ScaleRequest(f"scale-{len(self.scale_requests) + 1}", role, replicas, self.now)
        self.scale_requests.append(request)
        self.changed()
        return request.id

    # ---- questions ----------------------------------------------------------------------------------

    def all_running(self, names: frozenset[str]) -> bool:
        """Whether every one of these pods exists and runs without being hung."""
        return names.isdisjoint(self._unhealthy) and self.pods.keys() >= names

    def pod_on(self, node: str) -> SimPod | None:
        name = self.nodes[node].pod
        return self.pods.get(name) if name is not None else None

    def waiting_for_capacity(self, names: Iterable[str]) -> bool:
        """Whether any of these pods waits for a node."""
        return any(name in self._unplaced for name in names)

    def unplaced(self) -> Iterable[str]:
        return iter(self._unplaced)


class Refused(Exception):
    """The simulated cluster cannot carry the action out (recorded under its key)."""


class SimVerbs:
    """The simulator's hands for one batch (``trainguard.controller.apply``): the pods it launches are placed
    together at its end, so that they start together."""

    failures: tuple[type[Exception], ...] = (Refused,)

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.launched: list[SimPod] = []

    def now(self) -> float:
        return self.cluster.now

    def keep_error(self, error: ActionError) -> None:
        self.cluster.errors.append(error)
        self.cluster.changed()

    @contextmanager
    def batch(self, actions: Sequence[Action]) -> Iterator[None]:
        yield
        self.cluster.place(self.launched)

    def before_launches(self) -> None:
        pass

    def beside_launches(self) -> Sequence[Callable[[], None]]:
        return ()

    side_by_side = staticmethod(in_order)

    def launch(self, action: LaunchPod) -> None:
        cluster = self.cluster
        if action.pod in cluster.pods:
            raise Refused(f"pod {action.pod} already exists")
        pod = SimPod(
            action.pod,
            action.role,
            action.index,
            action.generation,
            cluster.role_pools.get(action.role, GPU_POOL),
            action.avoid_nodes,
        )
        cluster.pods[pod.name] = pod
        cluster._unplaced[pod.name] = None
        cluster._show(pod)
        self.launched.append(pod)

    def terminate(self, action: TerminatePod) -> None:
        cluster = self.cluster
        pod = cluster.pods.get(action.pod)
        if pod is None or pod.generation != action.generation or (pod.terminating and not action.force):
            return
        ended = pod.phase in (ObservedPhase.SUCCEEDED, ObservedPhase.FAILED)
        if action.force or ended or cluster.stop_seconds <= 0:
            cluster._remove(pod)
            return
        pod.terminating = True
        cluster._show(pod)
        cluster.clock.at(cluster.now + cluster.stop_seconds, lambda: cluster._gone(pod))

    def restart_in_place(self, action: RestartInPlace) -> None:
        cluster = self.cluster
        pod = cluster.pods.get(action.pod)
        if pod is None or pod.generation != action.generation:
            return
        cluster.clock.at(cluster.now + cluster.stop_seconds, lambda: cluster._rerun(pod, action.attempt))

    def nudge(self, action: NudgeSurvivors) -> None:
        self.cluster.nudges.append(action)  # simulated pods have no workers: what was asked is kept

    def release(self, action: ReleaseSurvivors) -> None:
        self.cluster.releases.append(action)  # simulated pods have no connections: what was asked is kept

    def update_discovery(self, action: UpdateDiscovery) -> None:
        self.cluster.discovery = action.hosts

    def isolate_node(self, action: IsolateNode) -> None:
        self.cluster.isolate(action.node)

    def emit_event(self, action: EmitEvent) -> None:
        self.cluster.events_total += 1
        self.cluster.recent_events.append(action)

    def write_status(self, action: WriteStatus) -> None:
        stored = self.cluster.stored
        if stored is not None and action.status.revision <= stored.revision:
            message = f"status revision {action.status.revision} is not newer than {stored.revision}"
            raise StatusConflict(message)
        self.cluster.stored = action.status
