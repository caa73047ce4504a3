"""What the gang scheduler is told (``trainguard.backends.k8s.gang``): pure, no cluster.

CCE's AITrainingJob (launcher 1, trainers 1 to 5) needs 2 pods to run: minMember 2, and the requests of one
launcher and one trainer; Kubeflow's schedulingPolicy overrides each field it names; a job whose pods name no
gang scheduler gets no PodGroup and no annotation."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from trainguard.backends.k8s import gang, manifests
from trainguard.backends.k8s.kinds import AITRAININGJOB

from .launches import cce_job as _cce
from .launches import launch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", "1"), ("500m", "0.5"), ("1Gi", str(2**30)), ("2k", "2000"), ("1.5", "1.5"), ("0", "0")],
)
def test_quantities(text: str, value: str) -> None:
    assert gang.parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", ["", "-1", "abc", "1Xi", "Gi"])
def test_a_bad_quantity_names_where_it_is(text: str) -> None:
    with pytest.raises(
        ValueError, match=r"trainer: containers\[0\].resources: cpu: .* is not a Kubernetes quantity"
    ):
        gang.parse_quantity(text, "trainer: containers[0].resources: cpu")


@pytest.mark.parametrize(
    ("amount", "text"), [("2", "2"), ("1.5", "1500m"), ("0.25", "250m"), (str(2**31), str(2**31))]
)
def test_formatting(amount: str, text: str) -> None:
    assert gang.format_quantity(Decimal(amount)) == text


def test_cces_job_needs_a_launcher_and_a_trainer_placed_together() -> None:
    job = _cce()
    assert gang.scheduler_of(job, None) == "volcano"
    spec = gang.pod_group_spec(job, "normal")
    assert spec["minMember"] == 2
    trainer = gang.pod_requests(job.spec.replica_specs["trainer"].template, "trainer")
    launcher = gang.pod_requests(job.spec.replica_specs["launcher"].template, "launcher")
    expected = {
        name: launcher.get(name, Decimal(0)) + trainer.get(name, Decimal(0)) for name in {*trainer, *launcher}
    }
    assert spec["minResources"] == {name: gang.format_quantity(v) for name, v in sorted(expected.items())}
    assert (spec["queue"], spec["priorityClassName"]) == ("default", "normal")
    assert gang.wanted_priority_class(job) == "normal"


def test_kubeflows_scheduling_policy_names_each_field() -> None:
    policy = {"minAvailable": 4, "queue": "research", "priorityClass": "high", "minResources": {"cpu": "8"}}
    job = _cce(schedulingPolicy=policy)
    spec = gang.pod_group_spec(job, gang.wanted_priority_class(job))
    assert spec == {
        "minMember": 4,
        "minResources": {"cpu": "8"},
        "queue": "research",
        "priorityClassName": "high",
    }


def test_a_scaled_role_without_a_minimum_moves_min_member() -> None:
    job = _cce()
    roles = job.spec.replica_specs
    fixed = job.model_copy(update={"spec": job.spec.model_copy(update={"replica_specs": {
        "launcher": roles["launcher"],
        "trainer": roles["trainer"].model_copy(update={"min_replicas": None, "max_replicas": None, "replicas": 4}),
    }})})  # fmt: skip
    assert gang.min_member(fixed) == 1 + 4


def test_every_pod_names_the_group_only_when_a_gang_scheduler_places_it() -> None:
    job = _cce()
    action = launch(job, "trainer", 0, {"launcher": 1, "trainer": 3})
    pod = manifests.pod(AITRAININGJOB, job, action, manifests.PodSettings())
    assert pod["metadata"]["annotations"][gang.ANNOTATION_GROUP] == job.name
    group = gang.pod_group(AITRAININGJOB, job, None)
    assert group["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert "priorityClassName" not in group["spec"]
    # The operator told to use the default scheduler instead: no gang, no annotation.
    plain = manifests.pod(AITRAININGJOB, job, action, manifests.PodSettings(scheduler="default-scheduler"))
    assert gang.ANNOTATION_GROUP not in plain["metadata"]["annotations"]
    assert gang.scheduler_of(job, "default-scheduler") is None
