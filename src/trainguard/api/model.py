"""The native TrainingJob (``apiVersion: trainguard.io/v1``): the one model every dialect converts into.

Field names are the camelCase of the YAML; Python attributes are their snake_case. Models are frozen:
change a job with ``model_copy(update=...)`` and validate again (``TrainingJob.model_validate``).
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from trainguard.api.exitcodes import DEFAULT_RETRYABLE, MAX_EXIT_CODE, ExitCodeSet
from trainguard.api.faultcheck import FaultCheckPolicy
from trainguard.pod.hangsignal import HangSignal

API_VERSION: Literal["trainguard.io/v1"] = "trainguard.io/v1"
KIND: Literal["TrainingJob"] = "TrainingJob"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ROLE_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$")
#: Pod names are "<job>-<role>-<index>" and must stay valid Kubernetes names (63 characters).
MAX_NAME_LENGTH = 63


class RestartPolicy(str, Enum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"
    ALWAYS = "Always"
    EXIT_CODE = "ExitCode"
    ON_NODE_FAIL = "OnNodeFail"
    ON_NODE_FAIL_WITH_EXIT_CODE = "OnNodeFailWithExitCode"


class RestartScope(str, Enum):
    POD = "Pod"
    REPLICA = "Replica"
    ALL = "All"


class EndPolicy(str, Enum):
    """The words of completePolicy and failPolicy, for roles and for the job."""

    ALL = "All"
    ANY = "Any"
    RANK0 = "Rank0"
    NONE = "None"


class CleanPodPolicy(str, Enum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


class FrameworkType(str, Enum):
    PYTORCH = "pytorch"
    HOROVOD = "horovod"
    #: CCE's schema lists it; trainguard refuses it at validation (``PADDLE_REFUSED``) until it launches Paddle.
    PADDLE = "paddle"
    GENERIC = "generic"


#: Why ``frameworkType: paddle`` is refused, and what to write instead.
PADDLE_REFUSED = (
    "frameworkType paddle is not supported yet: trainguard does not wire Paddle's elastic launch "
    "(paddle.distributed.launch) together; use frameworkType: generic with the launch command in the "
    "container, and trainguard still restarts, scales and records its pods as the policy says"
)
#: The frameworks a job may name.
SUPPORTED_FRAMEWORKS = tuple(f for f in FrameworkType if f is not FrameworkType.PADDLE)


class ExceptionalEvent(str, Enum):
    NODE_NOT_READY = "nodeNotReady"
    POD_FORCE_DELETED = "PodForceDeleted"
    POD_EVICTED = "PodEvicted"
    HANG = "hang"


def _parse_events(value: object) -> object:
    """Accept "nodeNotReady,PodForceDeleted", a list, or one name; names match case-insensitively."""
    items: list[object]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        return value
    by_folded = {event.value.lower(): event for event in ExceptionalEvent}
    # "preempted" and "DisruptionTarget" are the same fault as an eviction.
    by_folded.update(
        {"preempted": ExceptionalEvent.POD_EVICTED, "disruptiontarget": ExceptionalEvent.POD_EVICTED}
    )
    events: list[ExceptionalEvent] = []
    for item in items:
        if not isinstance(item, str) or item.strip().lower() not in by_folded:
            allowed = ", ".join(event.value for event in ExceptionalEvent)
            raise ValueError(f"{item!r} is not an exceptional event; allowed: {allowed}")
        event = by_folded[item.strip().lower()]
        if event not in events:
            events.append(event)
    if not events:
        raise ValueError("list at least one event, e.g. nodeNotReady")
    return tuple(events)


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="forbid",
        use_enum_values=False,
    )


class FaultTolerantRule(_Model):
    """One entry of a role's ordered ``faultTolerantPolicy``: the first entry that matches a fault wins."""

    exit_codes: ExitCodeSet | None = None
    exceptional_event: tuple[ExceptionalEvent, ...] | None = None
    restart_policy: RestartPolicy | None = None
    restart_scope: RestartScope = RestartScope.POD

    @field_validator("exceptional_event", mode="before")
    @classmethod
    def _events(cls, value: object) -> object:
        return _parse_events(value)

    @field_serializer("exceptional_event", when_used="json")
    def _events_as_written(self, events: tuple[ExceptionalEvent, ...] | None) -> str | None:
        """Written back as the comma list the dialects and the CRD use: "nodeNotReady,PodForceDeleted"."""
        return None if events is None else ",".join(event.value for event in events)

    @model_validator(mode="after")
    def _one_matcher(self) -> FaultTolerantRule:
        if (self.exit_codes is None) == (self.exceptional_event is None):
            raise ValueError("give exactly one of exitCodes or exceptionalEvent")
        return self

    @property
    def effective_restart_policy(self) -> RestartPolicy:
        if self.restart_policy is not None:
            return self.restart_policy
        return RestartPolicy.EXIT_CODE if self.exit_codes is not None else RestartPolicy.ON_NODE_FAIL


#: The most pods one role may have: ``replicas``, ``minReplicas`` and ``maxReplicas`` are at most this, in every
#: dialect (they all convert into ``ReplicaSpec``) and in the CRDs. Six times the largest jobs trained so far
#: even at one pod per GPU (16,384 GPUs), below what one Kubernetes cluster holds (150,000 pods); past it, a
#: typo (a few extra zeros) would have every backend plan pods that no cluster can run (docs/policy.md,
#: "Size limits").
MAX_REPLICAS = 100_000
#: Why, and what to do, when a count is above ``MAX_REPLICAS`` (``trainguard.api.problems`` says it).
REPLICAS_LIMIT = (
    f"at most {MAX_REPLICAS:,} pods per role, trainguard's limit (docs/policy.md, Size limits): "
    "lower it, or split the work into several jobs"
)


def _count_field(default: int | None, what: str) -> Any:
    return Field(
        default=default,
        ge=0,
        le=MAX_REPLICAS,
        description=f"{what}: 0 to {MAX_REPLICAS}, trainguard's limit of pods per role (docs/policy.md).",
        json_schema_extra={"limit": REPLICAS_LIMIT},
    )


class ReplicaSpec(_Model):
    """A role of the job (launcher/master, trainer/worker, ...)."""

    replica_type: str | None = None
    replicas: int = _count_field(1, "Pods of this role")
    min_replicas: int | None = _count_field(None, "Fewest pods an elastic role runs with")
    max_replicas: int | None = _count_field(None, "Most pods an elastic role grows to")
    restart_policy: RestartPolicy = RestartPolicy.ON_FAILURE
    restart_scope: RestartScope = RestartScope.POD
    #: Counted restarts of this role allowed inside the ``restart_timeout`` window (None: no limit).
    restart_limit: int | None = Field(default=None, ge=0)
    #: The sliding window of ``restart_limit``, in seconds (None: the whole life of the job).
    restart_timeout: int | None = Field(default=None, ge=1)
    #: Seconds a (re)started pod has to reach Running; past it the restart failed (StartTimeout).
    restart_time_limit: int | None = Field(default=None, ge=1)
    fault_tolerant_policy: tuple[FaultTolerantRule, ...] = ()
    complete_policy: EndPolicy = EndPolicy.ALL
    fail_policy: EndPolicy = EndPolicy.ANY
    #: The full Kubernetes PodTemplateSpec; the local backend reads command/args/env/workingDir from it.
    template: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _bounds(self) -> ReplicaSpec:
        low, high = self.min_replicas, self.max_replicas
        if low is not None and high is not None and low > high:
            raise ValueError(f"minReplicas {low} > maxReplicas {high}")
        if (low is not None and self.replicas < low) or (high is not None and self.replicas > high):
            raise ValueError(f"replicas {self.replicas} outside [{self.min_count}, {self.max_count}]")
        return self

    @property
    def min_count(self) -> int:
        return self.min_replicas if self.min_replicas is not None else min(self.replicas, self.max_count)

    @property
    def max_count(self) -> int:
        return self.max_replicas if self.max_replicas is not None else self.replicas

    @property
    def is_elastic(self) -> bool:
        return self.min_count < self.max_count

    @property
    def container(self) -> dict[str, Any]:
        """The first container of the template (the training container), or an empty dict."""
        spec = self.template.get("spec") or {}
        containers = spec.get("containers") or [] if isinstance(spec, dict) else []
        first = containers[0] if containers else {}
        return first if isinstance(first, dict) else {}

    @property
    def argv(self) -> list[str]:
        """The container's command followed by its args."""
        command = self.container.get("command") or []
        args = self.container.get("args") or []
        return [str(part) for part in [*command, *args]]


class HangPolicy(_Model):
    """Restart upon suspension: stop a hung process and run it again in place."""

    enabled: bool = True
    timeout_seconds: float = Field(default=1800, gt=0)
    max_consecutive: int = Field(default=3, ge=1)
    signals: tuple[HangSignal, ...] = (HangSignal.HEARTBEAT, HangSignal.LOG, HangSignal.CPU)
    grace_period_seconds: float = Field(default=10, ge=0)


class BackoffPolicy(_Model):
    """Delay before restarting the same pod again: none the first time, then initial, doubling up to max; a new
    streak after healthy running."""

    initial_seconds: float = Field(default=1, ge=0)
    max_seconds: float = Field(default=300, ge=0)
    reset_after_seconds: float = Field(default=600, ge=0)


class ElasticPolicy(_Model):
    """How torchrun's elastic agent is started for the worker role."""

    rdzv_backend: str = "c10d"
    rdzv_host: str | None = None
    rdzv_port: int | None = Field(default=None, ge=1, le=65535)
    #: torchrun's ``--rdzv-id`` (None: the job's name).
    rdzv_id: str | None = None
    #: torchrun's ``--rdzv-conf`` key=value pairs, e.g. ``join_timeout``.
    rdzv_conf: dict[str, str] = Field(default_factory=dict)
    #: torchrun's ``--standalone``: a rendezvous inside the pod itself (single-node jobs).
    standalone: bool = False
    n_proc_per_node: int | str = 1
    max_restarts: int | None = Field(default=None, ge=0)
    #: autoscaling/v2 MetricSpecs that move the elastic role's replicas between its min and max.
    metrics: tuple[dict[str, Any], ...] = ()


class SchedulingPolicy(_Model):
    """Gang scheduling (Kubeflow's ``runPolicy.schedulingPolicy``): what a gang scheduler is told about the job
    when its pods name one (Volcano's PodGroup). Each field left out is derived from the job: minAvailable
    from the roles' minimum replicas, minResources from their pods' requests, the queue ``default``, the
    priority class from the job's ``priority``."""

    #: Pods that must be placed together before any starts.
    min_available: int | None = Field(default=None, ge=1)
    queue: str | None = None
    priority_class: str | None = None
    min_resources: dict[str, str] | None = None
    schedule_timeout_seconds: int | None = Field(default=None, ge=1)


class ScaleTimeoutAction(str, Enum):
    """What a scale step that did not complete within ``scaling.timeoutSeconds`` ends as."""

    #: The pods the step added that do not run yet are removed and the role's size goes back by as many:
    #: the job trains on at the size it had reached (a Warning Event and a history entry say so).
    ROLL_BACK = "RollBack"
    #: The job fails, naming the pods that did not start.
    FAIL = "Fail"


class ScalingPolicy(_Model):
    """CCE's scaling timeout: how long a scale-out may take before it is rolled back (or fails the job).
    Any dialect sets it with the annotation ``trainguard.io/scaling-timeout-seconds``; a Horovod job's
    launcher gets it as ``HOROVOD_ELASTIC_TIMEOUT``, whose default (600 s) it shares."""

    #: From the scale step's acceptance to each added pod running.
    timeout_seconds: int = Field(default=600, ge=1, le=7 * 86400)
    on_timeout: ScaleTimeoutAction = ScaleTimeoutAction.ROLL_BACK


class JobRetryPolicy(_Model):
    """ModelArts-style job-level retries (annotations ``fault-tolerance/*``)."""

    #: Job-level restarts (scope All) for environment faults: exceptional events and retryable exit codes.
    retry_num: int | None = Field(default=None, ge=1, le=128)
    #: Restart on any non-zero exit, at most ``unconditional_max_consecutive`` times in a row.
    unconditional: bool = False
    unconditional_max_consecutive: int = Field(default=3, ge=1)


class ObjectMeta(_Model):
    model_config = ConfigDict(extra="ignore")

    name: str
    namespace: str = "default"
    uid: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _DNS_LABEL.match(value) or len(value) > MAX_NAME_LENGTH:
            raise ValueError(
                f"{value!r} is not a valid Kubernetes name: use at most {MAX_NAME_LENGTH} lowercase letters, "
                "digits and '-', starting and ending with a letter or digit"
            )
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not _DNS_LABEL.match(value) or len(value) > MAX_NAME_LENGTH:
            raise ValueError(f"{value!r} is not a valid namespace: lowercase letters, digits and '-'")
        return value


class TrainingJobSpec(_Model):
    replica_specs: dict[str, ReplicaSpec]
    framework_type: FrameworkType = FrameworkType.GENERIC
    complete_policy: EndPolicy = EndPolicy.ALL
    fail_policy: EndPolicy = EndPolicy.ANY
    clean_pod_policy: CleanPodPolicy = CleanPodPolicy.RUNNING
    #: Seconds the job may run before it ends as Timeout (``activeDeadlineSeconds`` is the same field).
    time_limit: int | None = Field(
        default=None, ge=1, validation_alias=AliasChoices("timeLimit", "activeDeadlineSeconds", "time_limit")
    )
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    #: Counted restarts of the whole job, over all roles (None: no job-level cap).
    backoff_limit: int | None = Field(default=None, ge=0)
    suspend: bool = False
    hang: HangPolicy | None = None
    #: The fault tolerance check of the job's nodes (None: its defaults, on where the policy restarts).
    fault_check: FaultCheckPolicy | None = None
    #: Exit codes that ExitCode/OnNodeFailWithExitCode retry; by default those of a signal (128-255).
    retryable_exit_codes: ExitCodeSet = DEFAULT_RETRYABLE
    backoff: BackoffPolicy = Field(default_factory=BackoffPolicy)
    elastic: ElasticPolicy | None = None
    job_retry: JobRetryPolicy | None = None
    fault_tolerant: bool = True
    priority: str | None = None
    plugin: dict[str, Any] | None = None
    scheduling_policy: SchedulingPolicy | None = None
    scaling: ScalingPolicy = Field(default_factory=ScalingPolicy)

    @field_validator("framework_type")
    @classmethod
    def _framework(cls, value: FrameworkType) -> FrameworkType:
        if value is FrameworkType.PADDLE:
            raise ValueError(PADDLE_REFUSED)
        return value

    @field_validator("replica_specs")
    @classmethod
    def _roles(cls, value: dict[str, ReplicaSpec]) -> dict[str, ReplicaSpec]:
        if not value:
            raise ValueError("a job needs at least one role, e.g. replicaSpecs: {worker: {replicas: 1, ...}}")
        for name in value:
            if not _ROLE_NAME.match(name):
                raise ValueError(f"role name {name!r}: use letters, digits and '-'")
        return value


class TrainingJob(_Model):
    """A training job in trainguard's native form."""

    api_version: Literal["trainguard.io/v1"] = API_VERSION
    kind: Literal["TrainingJob"] = KIND
    metadata: ObjectMeta
    spec: TrainingJobSpec
    #: Whatever a cluster wrote back; trainguard's own status is kept in the store, not in the spec model.
    status: dict[str, Any] | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _names_fit(self) -> TrainingJob:
        for role, replica in self.spec.replica_specs.items():
            longest = pod_name(self.metadata.name, role, max(replica.max_count - 1, 0))
            if len(longest) > MAX_NAME_LENGTH:
                raise ValueError(
                    f"pod name {longest!r} would be longer than {MAX_NAME_LENGTH} characters: "
                    "shorten the job name or the role name"
                )
        return self

    @property
    def name(self) -> str:
        return self.metadata.name

    def role(self, name: str) -> ReplicaSpec:
        """The role called ``name`` (case-insensitive, so Kubeflow's "Worker" is also "worker")."""
        for key, spec in self.spec.replica_specs.items():
            if key == name or key.lower() == name.lower():
                return spec
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The job as YAML/JSON data, with the field names users write."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def exit_codes_above_limit(self) -> list[tuple[str, int, int]]:
        """(role, rule position, highest code) of rules listing codes no process can report."""
        return [
            (role, position, rule.exit_codes.highest)
            for role, spec in self.spec.replica_specs.items()
            for position, rule in enumerate(spec.fault_tolerant_policy)
            if rule.exit_codes is not None and rule.exit_codes.highest > MAX_EXIT_CODE
        ]


def pod_name(job: str, role: str, index: int | str) -> str:
    """The name of a pod, the same on every backend: ``<job>-<role>-<index>``."""
    return f"{job}-{role.lower()}-{index}"
