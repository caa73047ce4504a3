"""One pod's launch, decided once for every backend: its command, its environment, its rank and the sizes of
the world it joins.

``launch_spec`` is a pure function of the job, the pod's slot, the roles' sizes and the backend's ``Network``
(where the job's pods find each other: loopback ports on the local runtime, DNS names behind the job's
Services on Kubernetes). The controller puts its result into every ``LaunchPod``; a backend only renders it:
the local runtime as a process's argv and environment, the operator as a container's command and ``env``.

- Ranks: roles in rank order (``trainguard.policy.roles.role_order``: a master, launcher or chief role first,
  as Kubeflow gives its Master rank 0; then the job's order), each pod's rank its role's offset plus its index;
  ``WORLD_SIZE`` the pods the roles have now (their members: a shrunk or scaled-in slot is not one).
- ``MASTER_ADDR`` is rank 0's pod, at the backend's address for it; ``MASTER_PORT`` the backend's port.
- A torchrun role's command runs under torchrun's elastic agent in the job's rendezvous
  (``trainguard.controller.torchrun_command``); every other pod of a torchrun job gets the ``PET_*`` defaults.
- ``$(VAR)`` references in the command stay as written: Kubernetes expands them in the container, and the
  local runtime expands them the same way when it starts the process.
- The container's own ``env`` is not part of the spec: each backend puts it after these variables, so that
  it wins, as Kubernetes does with duplicate names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.api import FrameworkType, TrainingJob, pod_name
from trainguard.controller import spares, torchrun_command
from trainguard.pod import contract
from trainguard.pod.checks import Ring
from trainguard.policy import faultcheck
from trainguard.policy.roles import is_leader, role_order

DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True)
class Network:
    """Where a backend's pods find each other."""

    #: ``host:port`` of the job's rendezvous store (torchrun's c10d endpoint).
    rendezvous_endpoint: str = "127.0.0.1:29400"
    #: A pod's address: ``{pod}`` is replaced by the pod's name (``{pod}.<job>`` behind a headless Service).
    pod_address: str = "{pod}"
    master_port: int = DEFAULT_MASTER_PORT
    #: The fault tolerance check's bandwidth probe's port in each pod; None where the pods share one address
    #: (the local runtime's loopback, where a ring would measure memory copies, not a network).
    ring_port: int | None = None

    def address(self, pod: str) -> str:
        return self.pod_address.replace("{pod}", pod)

    def ring(self, job: TrainingJob, role: str) -> Ring | None:
        """The bandwidth probe's ring over ``role``'s pods, where each pod has an address of its own."""
        if self.ring_port is None:
            return None
        host = self.address(pod_name(job.name, role, "{index}"))
        return Ring(host=host, port=self.ring_port, pods=job.spec.replica_specs[role].replicas)


@dataclass(frozen=True)
class LaunchSpec:
    """What one incarnation of a pod runs (the same on every backend)."""

    #: The command: the role's command and args, under torchrun's agent for a torchrun role.
    argv: tuple[str, ...]
    #: trainguard's variables, in order; the container's own ``env`` comes after them and wins.
    env: tuple[tuple[str, str], ...]
    rank: int
    world_size: int
    #: role -> pods, in rank order: the world this pod was started into.
    role_sizes: tuple[tuple[str, int], ...]
    #: The pod's agent joins the job's torchrun rendezvous (so it is nudged when a peer fails).
    in_rendezvous: bool = False
    #: The pod is one of a Horovod job's hosts (a worker that horovodrun reaches, not its launcher).
    horovod_host: bool = False

    @property
    def environment(self) -> dict[str, str]:
        return dict(self.env)

    def to_dict(self) -> dict[str, Any]:
        return {
            "argv": list(self.argv),
            "env": [list(pair) for pair in self.env],
            "rank": self.rank,
            "worldSize": self.world_size,
            "roleSizes": [list(pair) for pair in self.role_sizes],
            "inRendezvous": self.in_rendezvous,
            "horovodHost": self.horovod_host,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LaunchSpec:
        return cls(
            argv=tuple(str(part) for part in data["argv"]),
            env=tuple((str(name), str(value)) for name, value in data["env"]),
            rank=int(data["rank"]),
            world_size=int(data["worldSize"]),
            role_sizes=tuple((str(role), int(size)) for role, size in data["roleSizes"]),
            in_rendezvous=bool(data.get("inRendezvous", False)),
            horovod_host=bool(data.get("horovodHost", False)),
        )


@dataclass(frozen=True)
class RoleLaunch:
    """What every pod of one role shares (worked out once per role and reconcile)."""

    argv: tuple[str, ...]
    torchrun_env: tuple[tuple[str, str], ...]
    in_rendezvous: bool
    horovod_host: bool = False
    #: The fault tolerance check's settings for the agent (``contract.ENV_FAULT_CHECK``), where it is on.
    check_env: tuple[tuple[str, str], ...] = ()
    #: A Horovod launcher's elastic timeout: the job's scaling timeout.
    horovod_env: tuple[tuple[str, str], ...] = ()


def check_runnable(job: TrainingJob) -> None:
    """``LaunchError`` (a ValueError naming the field) for a role whose torchrun command cannot run; backends
    call it before they accept a job; and for a live job whose timeout cannot tell a fault from a slow step."""
    torchrun_command.check_live(job)
    spares.live_spares(job)
    for role in job.spec.replica_specs:
        role_launch(job, role, Network())


def launch_refusal(job: TrainingJob) -> str | None:
    """Why a backend would refuse the job beyond its form (``check_runnable``), in its words (naming the
    field and the fix); None when nothing does: what ``trainguard validate`` and the create page say too."""
    try:
        check_runnable(job)
    except ValueError as error:
        return str(error)
    return None


def role_launch(job: TrainingJob, role: str, network: Network) -> RoleLaunch:
    """The command and torchrun defaults of ``role``'s pods; ``LaunchError`` for a torchrun command that
    cannot run (no training script)."""
    endpoint = network.rendezvous_endpoint
    argv = torchrun_command.render(job, role, endpoint)
    in_rendezvous = role in torchrun_command.torchrun_roles(job)
    horovod = job.spec.framework_type is FrameworkType.HOROVOD
    return RoleLaunch(
        argv=tuple(argv),
        torchrun_env=tuple(
            {
                **torchrun_command.torchrun_env(job, endpoint, role),
                **(spares.spares_env(job) if in_rendezvous else {}),
            }.items()
        ),
        in_rendezvous=in_rendezvous,
        horovod_host=horovod and not is_leader(job, role),
        check_env=_check_env(job, role, endpoint if in_rendezvous else None, network.ring(job, role)),
        horovod_env=(
            ((contract.HOROVOD_ELASTIC_TIMEOUT, str(job.spec.scaling.timeout_seconds)),)
            if horovod and is_leader(job, role)
            else ()
        ),
    )


def _check_env(
    job: TrainingJob, role: str, endpoint: str | None, ring: Ring | None
) -> tuple[tuple[str, str], ...]:
    """The check's settings for the agent; the rendezvous is checked only by the roles that use it."""
    settings = faultcheck.settings(job, role, endpoint, ring)
    return () if settings is None else ((contract.ENV_FAULT_CHECK, settings.to_json()),)


def launch_spec(
    job: TrainingJob,
    role: str,
    index: int,
    generation: int,
    restarts: int,
    sizes: Mapping[str, int],
    network: Network,
    shared: RoleLaunch | None = None,
) -> LaunchSpec:
    """The launch of incarnation ``generation`` of pod ``index`` of ``role``, in a world of ``sizes`` (role ->
    pods the role has now). ``shared``: ``role_launch(job, role, network)``, when the caller has it."""
    shared = shared or role_launch(job, role, network)
    order = role_order(job)
    role_sizes = tuple((name, max(sizes.get(name, 0), 0)) for name in order)
    offset = 0
    for name, size in role_sizes:
        if name == role:
            break
        offset += size
    first = next((name for name, size in role_sizes if size > 0), order[0])
    name = pod_name(job.name, role, index)
    env = (
        (contract.ENV_JOB_NAME, job.name),
        (contract.ENV_JOB_NAMESPACE, job.metadata.namespace),
        (contract.ENV_JOB_UID, job.metadata.uid or ""),
        (contract.ENV_REPLICA_NAME, role),
        (contract.ENV_REPLICA_INDEX, str(index)),
        (contract.ENV_REPLICA_RESTART_COUNT, str(restarts)),
        (contract.ENV_POD_NAME, name),
        (contract.ENV_GENERATION, str(generation)),
        (contract.ENV_RDZV_ENDPOINT, network.rendezvous_endpoint),
        (contract.MASTER_ADDR, network.address(pod_name(job.name, first, 0))),
        (contract.MASTER_PORT, str(network.master_port)),
        (contract.WORLD_SIZE, str(sum(size for _, size in role_sizes))),
        (contract.RANK, str(offset + index)),
        ("PYTHONUNBUFFERED", "1"),
        *shared.torchrun_env,
        *shared.check_env,
        *shared.horovod_env,
    )
    return LaunchSpec(
        argv=shared.argv,
        env=env,
        rank=offset + index,
        world_size=sum(size for _, size in role_sizes),
        role_sizes=role_sizes,
        in_rendezvous=shared.in_rendezvous,
        horovod_host=shared.horovod_host,
    )
