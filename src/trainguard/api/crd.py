"""CustomResourceDefinitions generated from the model: ``trainingjobs.trainguard.io`` and, for CCE's format,
``aitrainingjobs.kongming.cce.baiudbce.com``.

The schemas are structural (every node has a type; no ``$ref``, ``anyOf`` or ``additionalProperties: false``):
the pod template and the status keep unknown fields, exit-code sets are int-or-string, and
``exceptionalEvent`` is the comma list the dialects write (``"nodeNotReady,PodForceDeleted"``).

The scale subresource (``kubectl scale``, an HPA) moves one role, fixed per resource: ``worker`` for
TrainingJobs (the role Kubeflow PyTorchJobs convert into) and ``trainer`` for AITrainingJobs (the elastic
role of CCE's example job).
The operator keeps, in status, that role's current pod count at ``.status.replicas.<role>`` and the label
selector of its pods at ``.status.selector``.
"""

from __future__ import annotations

import types
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from trainguard.api.dialects import aitrainingjob
from trainguard.api.exitcodes import ExitCodeSet
from trainguard.api.model import API_VERSION, KIND, FaultTolerantRule, TrainingJobSpec
from trainguard.api.problems import keys_of

GROUP, VERSION = API_VERSION.split("/")
#: The role that the scale subresource moves, per resource kind.
NATIVE_SCALE_ROLE = "worker"
AITRAININGJOB_SCALE_ROLE = "trainer"
STATUS_SELECTOR_PATH = ".status.selector"

_OVERRIDES: dict[tuple[type[BaseModel], str], dict[str, Any]] = {
    (FaultTolerantRule, "exceptional_event"): {
        "type": "string",
        "description": "Comma-separated events: nodeNotReady, PodForceDeleted, PodEvicted, hang.",
    },
}


def native_crd() -> dict[str, Any]:
    """The CRD of trainguard's own ``TrainingJob``."""
    return _crd(group=GROUP, kind=KIND, short_names=["tj"], scale_role=NATIVE_SCALE_ROLE)


def aitrainingjob_crd(group: str = aitrainingjob.GROUPS[0]) -> dict[str, Any]:
    """The CRD of CCE's ``AITrainingJob`` (either spelling of the group); CCE's example passes unchanged."""
    if group not in aitrainingjob.GROUPS:
        raise ValueError(f"group {group!r} is not one of {', '.join(aitrainingjob.GROUPS)}")
    return _crd(
        group=group, kind=aitrainingjob.KIND, short_names=["aitj"], scale_role=AITRAININGJOB_SCALE_ROLE
    )


def pytorchjob_crd() -> dict[str, Any]:
    """Kubeflow's ``PyTorchJob`` CRD as the chart installs it where a cluster has none (``--set
    pytorchjobs=true``): every field kept (trainguard validates the jobs itself and reports what is wrong in
    their status), the scale subresource on the Worker role."""
    plural, scale_role = "pytorchjobs", "Worker"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kubeflow.org"},
        "spec": {
            "group": "kubeflow.org",
            "names": {
                "kind": "PyTorchJob",
                "listKind": "PyTorchJobList",
                "plural": plural,
                "singular": "pytorchjob",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": f".spec.pytorchReplicaSpecs.{scale_role}.replicas",
                            # The status names roles as trainguard does, in lower case (``worker``).
                            "statusReplicasPath": f".status.replicas.{scale_role.lower()}",
                            "labelSelectorPath": STATUS_SELECTOR_PATH,
                        },
                    },
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


def keeps_status(crd: dict[str, Any], version: str) -> bool:
    """Whether the API server stores, unpruned, whatever the operator writes under ``.status`` of ``version``:
    the status keeps unknown fields and names none of its own (where it names some, their own schemas would
    prune inside them), or the schema leaves ``status`` to a root that keeps unknown fields. Kubeflow's own
    PyTorchJob CRD does not: its status has a schema of Kubeflow's fields only."""
    for served in crd.get("spec", {}).get("versions", []):
        if served.get("name") != version:
            continue
        root = (served.get("schema") or {}).get("openAPIV3Schema") or {}
        status = (root.get("properties") or {}).get("status")
        if status is None:
            return bool(root.get("x-kubernetes-preserve-unknown-fields"))
        return bool(status.get("x-kubernetes-preserve-unknown-fields")) and not status.get("properties")
    return False


def spec_schema() -> dict[str, Any]:
    """The OpenAPI v3 schema of ``spec``, shared by both resources."""
    return _model_schema(TrainingJobSpec)


def _crd(group: str, kind: str, short_names: list[str], scale_role: str) -> dict[str, Any]:
    plural = kind.lower() + "s"
    replicas_path = f".spec.replicaSpecs.{scale_role}.replicas"
    root = {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": replicas_path,
                            "statusReplicasPath": f".status.replicas.{scale_role}",
                            "labelSelectorPath": STATUS_SELECTOR_PATH,
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                        {"name": scale_role.capitalize() + "s", "type": "integer", "jsonPath": replicas_path},
                        {"name": "Running", "type": "integer", "jsonPath": f".status.replicas.{scale_role}"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                }
            ],
        },
    }


def _model_schema(model: type[BaseModel]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        keys = keys_of(info)
        field_schema = _OVERRIDES.get((model, name)) or _field_schema(info)
        for key in keys:  # alternative spellings (activeDeadlineSeconds) are accepted, so not pruned
            properties[key] = dict(field_schema)
        if info.is_required():
            required.append(keys[0])
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if model.__doc__:
        schema["description"] = " ".join(model.__doc__.split("\n\n")[0].split())
    if required:
        schema["required"] = required
    return schema


def _field_schema(info: FieldInfo) -> dict[str, Any]:
    schema = _type_schema(info.annotation)
    if info.description:
        schema["description"] = info.description
    for constraint in info.metadata:
        for attribute, keyword, exclusive in (
            ("ge", "minimum", False),
            ("gt", "minimum", True),
            ("le", "maximum", False),
            ("lt", "maximum", True),
        ):
            bound = getattr(constraint, attribute, None)
            if bound is not None:
                schema[keyword] = bound
                if exclusive:
                    schema["exclusive" + keyword.capitalize()] = True
    return schema


def _type_schema(annotation: Any) -> dict[str, Any]:
    members = [arg for arg in get_args(annotation) if arg is not type(None)]
    if get_origin(annotation) in (Union, types.UnionType):
        nullable = len(members) < len(get_args(annotation))
        if set(members) == {int, str}:
            schema: dict[str, Any] = {"x-kubernetes-int-or-string": True}
        elif len(members) == 1:
            schema = _type_schema(members[0])
        else:
            raise TypeError(f"no structural schema for {annotation}")
        return {**schema, "nullable": True} if nullable else schema
    if annotation is ExitCodeSet:
        return {
            "x-kubernetes-int-or-string": True,
            "description": 'Exit codes: "129,101", a range "1-100", or a mix "1-3,137".',
        }
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return {"type": "string", "enum": [member.value for member in annotation]}
    if get_origin(annotation) is Literal:
        return {"type": "string", "enum": list(get_args(annotation))}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model_schema(annotation)
    scalar = {bool: "boolean", int: "integer", float: "number", str: "string"}.get(annotation)
    if scalar is not None:
        return {"type": scalar}
    if get_origin(annotation) is dict:
        value = get_args(annotation)[1]
        if value is Any:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"type": "object", "additionalProperties": _type_schema(value)}
    if get_origin(annotation) in (tuple, list):
        return {"type": "array", "items": _type_schema(get_args(annotation)[0])}
    raise TypeError(f"no structural schema for {annotation}")
