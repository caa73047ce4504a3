"""The pods' wiring for releasing the survivors of a lost Horovod host on Kubernetes: the agent's
``--release-file`` on a downwardAPI projection of the pod's release annotation (on by default, off with the
operator's ``--no-release-survivors``, and only for Horovod jobs), and the annotation the operator writes on
each survivor. No cluster: the decision is tested in tests/unit/controller/test_release.py, the agent's part
in tests/integration/agent/test_agent_release.py, the whole on real nodes in tests/realk8s."""

from __future__ import annotations

from typing import Any

from tests.k8s.launches import cce_job, launch, pod_file
from trainguard.agent.release import parse_release
from trainguard.backends.k8s import manifests
from trainguard.backends.k8s.backend import JobBackend
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.kinds import AITRAININGJOB
from trainguard.backends.k8s.shared import Shared
from trainguard.controller.backend import ReleaseMode, ReleaseSurvivors

Obj = dict[str, Any]
SIZES = {"launcher": 1, "trainer": 3}


def _pod(role: str, settings: manifests.PodSettings, **spec: Any) -> Obj:
    job = cce_job(**spec)
    return manifests.pod(AITRAININGJOB, job, launch(job, role, 0, SIZES), settings)


def _release_wiring(pod: Obj) -> tuple[list[str], Obj | None]:
    command = pod["spec"]["containers"][0]["command"]
    options = (
        command[command.index("--release-file") : command.index("--release-file") + 2]
        if ("--release-file" in command)
        else []
    )
    return options, pod_file(pod, manifests.RELEASE_FILE)


def test_every_pod_of_a_horovod_job_watches_its_release_annotation() -> None:
    for role in ("launcher", "trainer"):
        pod = _pod(role, manifests.PodSettings())
        options, item = _release_wiring(pod)
        assert options == ["--release-file", manifests.RELEASE_FILE]
        assert item is not None
        assert item["fieldRef"]["fieldPath"] == f"metadata.annotations['{manifests.ANNOTATION_RELEASE}']"


def test_turned_off_or_not_horovod_no_pod_has_it() -> None:
    assert _release_wiring(_pod("trainer", manifests.PodSettings(release_survivors=False))) == ([], None)
    assert _release_wiring(_pod("trainer", manifests.PodSettings(), frameworkType="pytorch")) == ([], None)


class _Kube:
    """Pods by name; records each patch's body."""

    def __init__(self, pods: dict[str, Obj]) -> None:
        self.pods = pods
        self.patches: list[tuple[str, Obj]] = []

    def patch(self, path: str, patch: Obj) -> Obj:
        name = path.rsplit("/", 1)[-1]
        self.patches.append((name, patch))
        return self.pods[name]


def test_the_operator_writes_the_loss_on_each_survivor_of_the_job_only() -> None:
    job = cce_job()
    ours = _pod("trainer", manifests.PodSettings())
    ours["metadata"].update(uid="p1", resourceVersion="1")
    theirs = {
        "metadata": {"name": "someone-elses", "namespace": "default", "uid": "p2", "ownerReferences": []}
    }
    kube = _Kube({ours["metadata"]["name"]: ours, "someone-elses": theirs})
    pods = Cache(kube, "/api/v1/pods", lambda o, n: None)  # type: ignore[arg-type]
    nodes = Cache(kube, "/api/v1/nodes", lambda o, n: None)  # type: ignore[arg-type]
    shared = Shared(kube, pods, nodes)  # type: ignore[arg-type]
    for pod in (ours, theirs):
        shared.pods.put(pod)
    obj = {"metadata": {"name": job.name, "namespace": "default", "uid": "uid-1", "resourceVersion": "1"}}
    backend = JobBackend(shared, AITRAININGJOB, obj)
    assert backend.observe(job).release is ReleaseMode.ON

    action = ReleaseSurvivors(
        "k", f"{job.name}-trainer-1", "t#4", ("10.1.2.3",), (ours["metadata"]["name"], "someone-elses")
    )
    assert not backend.apply(job, [action]).conflict
    assert backend.observe(job).errors == ()
    ((name, patch),) = kube.patches  # the other job's pod is left alone
    assert name == ours["metadata"]["name"]
    release = parse_release(patch["metadata"]["annotations"][manifests.ANNOTATION_RELEASE])
    assert release is not None
    assert (release.token, release.addresses) == ("t#4", ("10.1.2.3",))

    shared.settings = manifests.PodSettings(release_survivors=False)
    assert backend.observe(job).release is ReleaseMode.OFF
