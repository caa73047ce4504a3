"""The CRDs are structural, and what trainguard accepts passes their schemas with nothing pruned."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.api.jobdata import EXAMPLES, cce_job
from trainguard.api.crd import aitrainingjob_crd, keeps_status, native_crd, pytorchjob_crd
from trainguard.api.load import load_jobs

TYPES = {"object", "array", "string", "integer", "number", "boolean"}
FORBIDDEN = {"$ref", "$defs", "definitions", "anyOf", "oneOf", "allOf", "not"}


def crds() -> list[dict[str, Any]]:
    return [native_crd(), aitrainingjob_crd(), aitrainingjob_crd("kongming.cce.baidubce.com")]


def root_schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for key, child in schema.get("properties", {}).items():
        yield from nodes(child, f"{path}.{key}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")


@pytest.mark.parametrize("crd", crds(), ids=lambda crd: crd["metadata"]["name"])
def test_the_schema_is_structural(crd: dict[str, Any]) -> None:
    for path, node in nodes(root_schema(crd)):
        assert not FORBIDDEN & node.keys(), path
        untyped_ok = node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields"
        )
        assert node.get("type") in TYPES or (untyped_ok and "type" not in node), path
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("additionalProperties", {}) is not False, path
        if node.get("type") == "array":
            assert "items" in node, path
        for flag in ("exclusiveMinimum", "exclusiveMaximum"):
            assert isinstance(node.get(flag, True), bool), path  # OpenAPI v3.0 flags, not numbers
    assert root_schema(crd)["properties"]["metadata"] == {
        "type": "object"
    }  # only name/generateName may be restricted


@pytest.mark.parametrize("crd", crds(), ids=lambda crd: crd["metadata"]["name"])
def test_subresources_point_at_real_fields(crd: dict[str, Any]) -> None:
    (version,) = crd["spec"]["versions"]
    scale = version["subresources"]["scale"]
    assert version["subresources"]["status"] == {}
    role = "worker" if crd["spec"]["names"]["kind"] == "TrainingJob" else "trainer"
    assert scale == {
        "specReplicasPath": f".spec.replicaSpecs.{role}.replicas",
        "statusReplicasPath": f".status.replicas.{role}",
        "labelSelectorPath": ".status.selector",
    }
    replicas = root_schema(crd)["properties"]["spec"]["properties"]["replicaSpecs"]["additionalProperties"]
    assert replicas["properties"]["replicas"]["type"] == "integer"
    assert root_schema(crd)["properties"]["status"]["x-kubernetes-preserve-unknown-fields"] is True
    columns = {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}
    assert columns["Age"] == ".metadata.creationTimestamp"


def test_names() -> None:
    assert native_crd()["metadata"]["name"] == "trainingjobs.trainguard.io"
    assert aitrainingjob_crd()["metadata"]["name"] == "aitrainingjobs.kongming.cce.baiudbce.com"
    assert aitrainingjob_crd()["spec"]["names"]["kind"] == "AITrainingJob"
    with pytest.raises(ValueError, match="is not one of"):
        aitrainingjob_crd("example.com")


# A small version of the API server's validation and pruning, enough to check our schemas against our data.


def check(value: Any, schema: dict[str, Any], path: str, errors: list[str], pruned: list[str]) -> None:
    if value is None:
        if not schema.get("nullable"):
            errors.append(f"{path}: null")
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, int | str) or isinstance(value, bool):
            errors.append(f"{path}: not int-or-string")
        return
    kind = schema.get("type")
    expected = {
        "object": dict,
        "array": list,
        "string": str,
        "integer": int,
        "number": int | float,
        "boolean": bool,
    }.get(kind or "")
    if expected is not None and (
        not isinstance(value, expected) or (kind != "boolean" and isinstance(value, bool))
    ):
        errors.append(f"{path}: not {kind}")
        return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in enum")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: below minimum")
    if isinstance(value, list):
        for index, item in enumerate(value):
            check(item, schema["items"], f"{path}[{index}]", errors, pruned)
    if path == ".metadata":
        return  # ObjectMeta: the API server knows its fields
    if isinstance(value, dict) and not schema.get("x-kubernetes-preserve-unknown-fields"):
        errors.extend(f"{path}.{name}: required" for name in schema.get("required", []) if name not in value)
        for key, item in value.items():
            if key in schema.get("properties", {}):
                check(item, schema["properties"][key], f"{path}.{key}", errors, pruned)
            elif isinstance(schema.get("additionalProperties"), dict):
                check(item, schema["additionalProperties"], f"{path}.{key}", errors, pruned)
            else:
                pruned.append(f"{path}.{key}")


def verdict(value: Any, crd: dict[str, Any]) -> tuple[list[str], list[str]]:
    errors: list[str] = []
    pruned: list[str] = []
    check(value, root_schema(crd), "", errors, pruned)
    return errors, pruned


def test_the_cce_example_passes_the_aitrainingjob_crd_unchanged() -> None:
    assert verdict(cce_job(), aitrainingjob_crd()) == ([], [])


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_converted_passes_the_native_crd(name: str) -> None:
    for loaded in load_jobs(EXAMPLES / name):
        assert verdict(loaded.job.to_dict(), native_crd()) == ([], [])


def test_the_crd_rejects_what_the_model_rejects() -> None:
    job = cce_job()
    job["spec"]["replicaSpecs"]["trainer"]["restartPolicy"] = "OnFailed"
    job["spec"]["replicaSpecs"]["trainer"]["replicas"] = -1
    errors, _ = verdict(job, aitrainingjob_crd())
    assert errors == [
        ".spec.replicaSpecs.trainer.replicas: below minimum",
        ".spec.replicaSpecs.trainer.restartPolicy: 'OnFailed' not in enum",
    ]


#: Kubeflow's PyTorchJob CRD as its training operator installs it, cut to what matters here: a status schema
#: of Kubeflow's own fields.
KUBEFLOWS = {
    "spec": {
        "versions": [
            {
                "name": "v1",
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            "status": {
                                "type": "object",
                                "properties": {
                                    "conditions": {"type": "array"},
                                    "startTime": {"type": "string"},
                                },
                            },
                        },
                    }
                },
            }
        ]
    }
}


def _with_root(root: dict[str, object]) -> dict[str, object]:
    return {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": root}}]}}


@pytest.mark.parametrize(
    ("crd", "version", "kept"),
    [
        (pytorchjob_crd(), "v1", True),
        (native_crd(), "v1", True),
        (aitrainingjob_crd(), "v1", True),
        (KUBEFLOWS, "v1", False),
        (pytorchjob_crd(), "v2", False),  # no such version
        (_with_root({"type": "object"}), "v1", False),  # a root that prunes, no status named
        # a status that keeps unknown fields but names some: inside those, their schemas prune
        (_with_root({"properties": {"status": {"x-kubernetes-preserve-unknown-fields": True,
                                               "properties": {"conditions": {"type": "array"}}}}}), "v1", False),
        (_with_root({"properties": {"status": {"x-kubernetes-preserve-unknown-fields": True}}}), "v1", True),
    ],
)  # fmt: skip
def test_keeps_status(crd: dict[str, object], version: str, kept: bool) -> None:
    assert keeps_status(crd, version) is kept
