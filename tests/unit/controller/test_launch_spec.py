"""One launch spec, two renderings: the local runtime (a process's environment) and the operator (a container's
``env``) give every pod of a job the same rank, world size and environment; only the addresses differ, each
backend's own (loopback ports; DNS names behind the job's Services)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.fake_cluster import FakeCluster
from tests.k8s.launches import env_of
from trainguard.api import TrainingJob, pod_name
from trainguard.api.load import load_jobs
from trainguard.backends.k8s import manifests, services
from trainguard.backends.k8s.kinds import NATIVE
from trainguard.backends.local import podenv
from trainguard.controller import JobStatus, LaunchPod, step
from trainguard.controller.launchspec import Network
from trainguard.pod.checks import RING_PORT, Settings

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "jobs"
#: Where each backend puts things: these variables name addresses, so their values differ by backend.
#: Where each backend's pods find each other (its own addresses), and the check's settings, which name the
#: rendezvous among them (compared below, but for the rendezvous).
ADDRESSES = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "TRAINGUARD_RDZV_ENDPOINT", "PET_RDZV_ENDPOINT", "TRAINGUARD_FAULT_CHECK"}
)
LOCAL_PORT = 41000


def _job(name: str) -> TrainingJob:
    job = load_jobs(EXAMPLES / name)[0].job
    return job.model_copy(update={"metadata": job.metadata.model_copy(update={"uid": "uid-7"})})


def _workers_before_master() -> TrainingJob:
    """A native job that lists its workers before its master: the master still gets rank 0."""

    def role(replicas: int, kind: str) -> dict[str, Any]:
        container = {"name": "m", "image": "i", "command": ["python", "train.py"]}
        return {"replicas": replicas, "replicaType": kind, "template": {"spec": {"containers": [container]}}}

    return TrainingJob.model_validate(
        {
            "apiVersion": "trainguard.io/v1",
            "kind": "TrainingJob",
            "metadata": {"name": "mw", "uid": "uid-8"},
            "spec": {"replicaSpecs": {"worker": role(2, "worker"), "master": role(1, "master")}},
        }
    )


def _launches(
    job: TrainingJob, network: Network, scale: dict[str, int] | None = None
) -> dict[str, LaunchPod]:
    """The launches a reconcile issues for the job on a cluster whose pods find each other at ``network``:
    the first start, and with ``scale`` (role -> replicas) the launches of a resize once all runs."""
    cluster = FakeCluster.with_nodes(8, network=network)
    status, launched = JobStatus(), {}
    for _ in range(6):
        status = step(cluster, job, status, cluster.now).status
        cluster.progress()
        cluster.advance(1.0)
    launched = {a.pod: a for a in cluster.log if isinstance(a, LaunchPod)}
    if scale:
        for role, replicas in scale.items():
            cluster.scale(role, replicas)
        for _ in range(4):
            status = step(cluster, job, status, cluster.now).status
            cluster.progress()
            cluster.advance(1.0)
        launched = {a.pod: a for a in cluster.log if isinstance(a, LaunchPod)}
    return launched


def _local_env(job: TrainingJob, launch: LaunchPod) -> dict[str, str]:
    return podenv.pod_environment(job, launch.role, launch.spec, base={})


def _kubernetes_env(job: TrainingJob, launch: LaunchPod) -> dict[str, str]:
    # The last of equal names wins; the node's name comes from the downward API (no value to compare); the
    # agent adds trainguard's own variables, given on its command line.
    return env_of(manifests.pod(NATIVE, job, launch, manifests.PodSettings()))


CASES = [
    # CCE's AITrainingJob example: a launcher (rank 0) and 3 trainers.
    ("cce-horovod-elastic.yaml", None, {"launcher-0": 0, "trainer-0": 1, "trainer-1": 2, "trainer-2": 3}, 4),
    # Kubeflow's PyTorchJob: a Master and 2 Workers.
    ("pytorchjob-plain.yaml", None, {"master-0": 0, "worker-0": 1, "worker-1": 2}, 3),
    # Elastic workers, 3 -> 4 while it runs: the new worker starts in a world of 4.
    (
        "pytorchjob-elastic.yaml",
        {"Worker": 4},
        {"worker-0": 0, "worker-1": 1, "worker-2": 2, "worker-3": 3},
        4,
    ),
    # Workers listed before the master: rank order puts the master first all the same.
    (None, None, {"master-0": 0, "worker-0": 1, "worker-1": 2}, 3),
]


@pytest.mark.parametrize(
    ("example", "scale", "ranks", "world"), CASES, ids=["cce", "kubeflow", "elastic", "order"]
)
def test_both_backends_give_every_pod_the_same_rank_world_and_environment(
    example: str | None, scale: dict[str, int] | None, ranks: dict[str, int], world: int
) -> None:
    job = _job(example) if example else _workers_before_master()
    local = _launches(job, podenv.network(LOCAL_PORT), scale)
    kube = _launches(job, services.network(job), scale)
    assert set(local) == set(kube) == {f"{job.name}-{pod}" for pod in ranks}
    for name, launch in local.items():
        on_local, on_kube = _local_env(job, launch), _kubernetes_env(job, kube[name])
        # Where memory snapshots go is each backend's own: the pod's memory here, the node's on the local runtime
        # (which its runtime adds, tests/integration/torch/test_torch_snapshots.py).
        assert on_kube.pop("TRAINGUARD_SNAPSHOT_DIR") == manifests.SNAPSHOT_DIR
        # One OpenMP thread per pod is the local runtime's own too: its pods share one machine's cores.
        assert on_local.pop("OMP_NUM_THREADS") == podenv.DEFAULTS["OMP_NUM_THREADS"] == "1"
        assert launch.spec.rank == kube[name].spec.rank == ranks[name.removeprefix(f"{job.name}-")], name
        assert int(on_local["RANK"]) == int(on_kube["RANK"]) == launch.spec.rank
        assert on_local.keys() == on_kube.keys(), name
        assert {k: v for k, v in on_local.items() if k not in ADDRESSES} == {
            k: v for k, v in on_kube.items() if k not in ADDRESSES
        }, name
        checks_local, checks_kube = (
            Settings.from_json(env["TRAINGUARD_FAULT_CHECK"]) for env in (on_local, on_kube)
        )
        # The rendezvous is checked by the pods that use it (torchrun's), each backend's own address.
        in_rendezvous = launch.spec.in_rendezvous
        assert checks_local.rendezvous == (on_local["TRAINGUARD_RDZV_ENDPOINT"] if in_rendezvous else None)
        assert checks_kube.rendezvous == (on_kube["TRAINGUARD_RDZV_ENDPOINT"] if in_rendezvous else None)
        # The bandwidth probe's ring: each Kubernetes pod at its name behind the job's Service, its role's pods
        # in it; none on the local runtime, whose pods share loopback.
        role = launch.role
        assert checks_local.ring is None
        assert checks_kube.ring is not None
        assert checks_kube.ring.address_of(0) == (f"{pod_name(job.name, role, 0)}.{job.name}", RING_PORT)
        assert checks_kube.ring.pods == job.spec.replica_specs[role].replicas
        assert replace(checks_local, rendezvous=None) == replace(checks_kube, rendezvous=None, ring=None)
        # The same command (torchrun's where it applies), each naming its own rendezvous endpoint.
        here, there = f"127.0.0.1:{LOCAL_PORT}", services.rendezvous_endpoint(job)
        assert [part.replace(here, "RDZV") for part in launch.spec.argv] == [
            part.replace(there, "RDZV") for part in kube[name].spec.argv
        ]
        # The addresses: each backend's own, both naming rank 0's pod and the job's rendezvous.
        rank0 = next(pod for pod, rank in ranks.items() if rank == 0)
        assert on_local["MASTER_ADDR"] == "127.0.0.1"
        assert on_kube["MASTER_ADDR"] == f"{job.name}-{rank0}.{job.name}"
        assert on_local["TRAINGUARD_RDZV_ENDPOINT"] == f"127.0.0.1:{LOCAL_PORT}"
        assert on_kube["TRAINGUARD_RDZV_ENDPOINT"] == services.rendezvous_endpoint(job)
    # The world a pod was started into: every pod of the first start in the first world, a resize's in the new.
    first = {name: a.spec.world_size for name, a in local.items()}
    assert max(first.values()) == world
    if scale:
        added = sorted(local)[-1]
        assert local[added].spec.world_size == world
        assert {a.spec.world_size for n, a in local.items() if n != added} == {world - 1}
