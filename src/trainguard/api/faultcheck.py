"""``spec.faultCheck``: the fault tolerance check of a job's nodes (ModelArts' Training Job Fault Tolerance Check).

Every dialect reads it: the native field, or the annotation ``trainguard.io/fault-check: "false"`` (or
``"true"``) on any job. Left out, it is on wherever the job's policy restarts on faults
(``trainguard.policy.faultcheck.enabled``). docs/faultcheck.md states what each field does.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from trainguard.pod.checks import ITEMS

#: The annotation that turns the check on or off on any dialect's job.
ANNOTATION = "trainguard.io/fault-check"
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}  # fmt: skip


class StragglerPolicy(BaseModel):
    """Stragglers: a rank that works ``factor`` times longer per step than the job's other ranks (its median),
    over ``steps`` steps or more, is a ``Straggler`` finding."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")

    enabled: bool = True
    factor: float = Field(default=1.5, gt=1, le=100)
    steps: int = Field(default=20, ge=1, le=100000)
    #: ... and its extra work costs at least this share of a step's wall time (the job waits that long).
    min_share: float = Field(default=0.1, ge=0, le=1)
    #: ``Event``: a Warning Event, the history and the page say so. ``Replace``: treated as a fault of its
    #: node (the pod issued again elsewhere, the node isolated, within the check's bounds).
    action: Literal["Event", "Replace"] = "Event"


class FaultCheckPolicy(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")

    #: None: on wherever the job's policy restarts on faults.
    enabled: bool | None = None
    #: Seconds between periodic checks while the command runs; 0: none.
    period_seconds: float = Field(default=300, ge=0, le=86400)
    #: One check's bound, all items: past it the check is recorded ``environment`` and isolates nothing.
    timeout_seconds: float = Field(default=60, gt=0, le=600)
    #: Item -> threshold, for the items whose default does not suit the job.
    thresholds: dict[str, float] = Field(default_factory=dict)
    #: Items not run.
    disabled_items: tuple[str, ...] = ()
    #: Directory -> the space the job needs free there ("20Gi", or bytes).
    disk: dict[str, int] = Field(default_factory=dict)
    #: At most this share of the cluster's nodes isolated (at least 1 node) because of checks.
    max_isolated_share: float = Field(default=0.1, gt=0, le=1)
    #: At most this many nodes isolated because of this job.
    max_isolations: int = Field(default=3, ge=0, le=1000)
    #: Pods issued again after failed checks, at most, before the job fails.
    max_reissues: int = Field(default=8, ge=0, le=128)
    #: A pod issued again that waits this long for resources ends the job, with its reason.
    reissue_timeout_seconds: float = Field(default=1800, gt=0, le=7 * 86400)
    stragglers: StragglerPolicy = Field(default_factory=StragglerPolicy)

    @field_validator("thresholds")
    @classmethod
    def _thresholds(cls, value: dict[str, float]) -> dict[str, float]:
        for name, threshold in value.items():
            spec = ITEMS.get(name)
            if spec is None:
                raise ValueError(f"unknown check item {name!r}; the items are {', '.join(sorted(ITEMS))}")
            if not spec.low <= threshold <= spec.high:
                raise ValueError(
                    f"thresholds.{name}: {threshold} is out of range; give a value from {spec.low:g} to "
                    f"{spec.high:g} ({spec.unit})"
                )
        return value

    @field_validator("disabled_items")
    @classmethod
    def _disabled(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [name for name in value if name not in ITEMS]
        if unknown:
            raise ValueError(f"unknown check items {unknown}; the items are {', '.join(sorted(ITEMS))}")
        return value

    @field_validator("disk", mode="before")
    @classmethod
    def _disk(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        out: dict[str, int] = {}
        for directory, need in value.items():
            if not str(directory).startswith("/"):
                raise ValueError(f"disk: {directory!r} is not an absolute directory, e.g. /dev/shm")
            out[str(directory)] = quantity(need, f"disk.{directory}")
        return out


def quantity(value: object, where: str) -> int:
    """Bytes from ``20Gi``, ``500M`` or a number; ValueError naming ``where``."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: give a size such as 20Gi or 500Mi")
    if isinstance(value, int | float) and value >= 0:
        return int(value)
    found = _QUANTITY.match(str(value).strip())
    if found is None:
        raise ValueError(f"{where}: {value!r} is not a size; give one such as 20Gi or 500Mi")
    return int(float(found[1]) * _UNITS[found[2]])
