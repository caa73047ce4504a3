"""Pod counts have one documented maximum (``MAX_REPLICAS`` per role), the same in every dialect and in the
CRDs; past it the error names the file, the field, the limit and what to do."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.api.jobdata import cce_job, edited, error_of, load_one, native, pytorchjob
from trainguard.api.crd import aitrainingjob_crd, native_crd
from trainguard.api.model import MAX_REPLICAS, ReplicaSpec

ROLE = "spec.replicaSpecs.worker"
TRAINER = "spec.replicaSpecs.trainer"
ABOVE = MAX_REPLICAS + 1
LIMIT = re.escape(f"at most {MAX_REPLICAS:,} pods per role, trainguard's limit (docs/policy.md, Size limits)")
FIX = re.escape("lower it, or split the work into several jobs")


def _elastic_native(low: int, replicas: int, high: int) -> dict[str, Any]:
    job = native()
    job["spec"]["replicaSpecs"]["worker"].update(minReplicas=low, replicas=replicas, maxReplicas=high)
    return job


def _elastic_pytorchjob(high: int) -> dict[str, Any]:
    return pytorchjob(elasticPolicy={"minReplicas": 1, "maxReplicas": high})


# (case, document, the field the problem is reported at, its name in the message)
TOO_LARGE: list[tuple[str, dict[str, Any], str, str]] = [
    ("native replicas", edited(native(), f"{ROLE}.replicas", ABOVE), f"{ROLE}.replicas", "replicas"),
    (
        "native minReplicas",
        _elastic_native(ABOVE, ABOVE, ABOVE),
        f"{ROLE}.minReplicas",
        "minReplicas",
    ),
    (
        "native maxReplicas",
        _elastic_native(1, 2, 10**9),
        f"{ROLE}.maxReplicas",
        "maxReplicas",
    ),
    (
        "AITrainingJob trainer replicas",
        edited(edited(cce_job(), f"{TRAINER}.replicas", ABOVE), f"{TRAINER}.maxReplicas", 5),
        f"{TRAINER}.replicas",
        "replicas",
    ),
    (
        "PyTorchJob Worker replicas",
        pytorchjob(workers=ABOVE),
        "spec.pytorchReplicaSpecs.Worker.replicas",
        "replicas",
    ),
    ("PyTorchJob elasticPolicy", _elastic_pytorchjob(ABOVE), "spec.elasticPolicy.maxReplicas", "maxReplicas"),
]


@pytest.mark.parametrize(
    ("document", "path", "field"), [c[1:] for c in TOO_LARGE], ids=[c[0] for c in TOO_LARGE]
)
def test_a_count_above_the_limit_names_file_field_limit_and_fix(
    document: dict[str, Any], path: str, field: str
) -> None:
    error = error_of(document, "jobs/big.yaml")
    problem = next((p for p in error.problems if p.path == path), None)
    assert problem is not None, str(error)
    assert problem.file == "jobs/big.yaml"
    assert problem.line is not None
    assert re.match(rf"{field} \d+ is too large: {LIMIT}: {FIX}$", problem.message), problem.message
    assert re.search(rf"^jobs/big.yaml:\d+: {re.escape(path)}: ", str(error), re.MULTILINE)


@pytest.mark.parametrize(
    "document",
    [
        _elastic_native(1, MAX_REPLICAS, MAX_REPLICAS),
        _elastic_native(MAX_REPLICAS, MAX_REPLICAS, MAX_REPLICAS),
        _elastic_native(1, 2, MAX_REPLICAS),
        pytorchjob(workers=MAX_REPLICAS),
        _elastic_pytorchjob(MAX_REPLICAS),
        edited(
            edited(cce_job(), f"{TRAINER}.replicas", MAX_REPLICAS), f"{TRAINER}.maxReplicas", MAX_REPLICAS
        ),
    ],
    ids=["native", "native min", "native max", "pytorchjob", "pytorchjob elastic", "aitrainingjob"],
)
def test_the_limit_itself_is_allowed(document: dict[str, Any]) -> None:
    job = load_one(document).job
    assert max(spec.max_count for spec in job.spec.replica_specs.values()) == MAX_REPLICAS


@given(count=st.integers(min_value=0, max_value=10 * MAX_REPLICAS))
def test_a_count_is_valid_exactly_up_to_the_limit(count: int) -> None:
    for field in ("replicas", "min_replicas", "max_replicas"):
        values = {"replicas": count, "min_replicas": count, "max_replicas": count}
        try:
            spec = ReplicaSpec(**{**values, field: count})
        except ValueError:
            assert count > MAX_REPLICAS
        else:
            assert count <= MAX_REPLICAS
            assert spec.max_count == count


@pytest.mark.parametrize("crd", [native_crd(), aitrainingjob_crd()], ids=["native", "aitrainingjob"])
def test_the_crds_carry_the_limit_and_say_why(crd: dict[str, Any]) -> None:
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    role = spec["properties"]["replicaSpecs"]["additionalProperties"]["properties"]
    for field in ("replicas", "minReplicas", "maxReplicas"):
        assert role[field]["minimum"] == 0
        assert role[field]["maximum"] == MAX_REPLICAS
        assert f"0 to {MAX_REPLICAS}" in role[field]["description"]
        assert "docs/policy.md" in role[field]["description"]
