"""The create page: a job from a few fields, as ModelArts' and CCE's create pages ask for them (role sizes, the
image and command, auto restart with its retry count, restart upon suspension with its timeout, the fault
tolerance check, live mode), written in the dialect chosen and checked the way ``trainguard validate`` checks
a file.

``draft(form)`` writes the job as a document of the dialect (every name spelled by the dialect's own module:
the ModelArts annotations, Kubeflow's replica types and container name, the check's and live mode's
annotations), dumps it as the YAML the page shows, and loads that text with ``trainguard.api.load.load_bytes``,
the loader ``validate`` runs on a file: the same problems, word for word, naming the field and the fix. The page
never spells a field itself; it sends what was typed and shows what comes back.

How each dialect says each field (docs/ui.md, "Creating a job"):

- trainguard's ``TrainingJob`` and CCE's ``AITrainingJob`` (its fields are the native ones): the roles'
  ``replicas``/``minReplicas``/``maxReplicas``; auto restart is ``spec.jobRetry.retryNum`` (ModelArts' job
  retry: an environment fault restarts the whole job, at most that many times); restart upon suspension is
  ``spec.hang`` with its ``timeoutSeconds``; the check is ``spec.faultCheck.enabled``. CCE's form adds its
  ``faultTolerant: true`` and each role's ``replicaType``.
- Kubeflow's ``PyTorchJob``: ``pytorchReplicaSpecs`` ``Master``/``Worker``, the Worker's min and max in
  ``elasticPolicy``, the container named ``pytorch``; Kubeflow has no field for the rest, so the annotations
  that work on any dialect say it: ``fault-tolerance/job-retry-num``, ``fault-tolerance/hang-retry`` with
  ``trainguard.io/hang-timeout-seconds``, ``trainguard.io/fault-check``.
- ModelArts' annotations: a ``TrainingJob`` whose every setting is one of those annotations, as an overlay
  would lay them over any job.

Live mode is the annotation ``trainguard.io/live`` everywhere. Every role's own ``restartPolicy`` is ``Never``:
what restarts is what the form says (the job retry, the hang restart), as on ModelArts.

What was typed goes into the document as typed (a number as a number, anything else as text), so that a bad
value is refused by validation with validation's words, never corrected here.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from trainguard.api import SpecError, timeouts
from trainguard.api.dialects import aitrainingjob, modelarts, pytorchjob
from trainguard.api.faultcheck import ANNOTATION as FAULT_CHECK_ANNOTATION
from trainguard.api.load import LoadedJob, load_bytes
from trainguard.api.model import API_VERSION, KIND, FrameworkType, HangPolicy, RestartPolicy
from trainguard.controller.launchspec import launch_refusal
from trainguard.controller.torchrun_command import LIVE_ANNOTATION
from trainguard.ui.pages import PageError

#: A value as the page sent it: a whole number, a decimal, text, or nothing (left out).
Typed = int | float | str | None
#: The container every role runs (Kubeflow's is ``pytorch``: it runs the container of that name).
CONTAINER = "trainer"
#: A retry count the page starts with (ModelArts' range is 1-128).
DEFAULT_RETRIES = 3
_TRUE, _FALSE = "true", "false"


@dataclass(frozen=True)
class Choice:
    """A dialect the page writes: its key, what users call it, the roles a new job starts with."""

    key: str
    label: str
    roles: tuple[str, ...]
    api_version: str
    kind: str
    #: The framework a job of this dialect always is (None: the form's choice).
    framework: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "roles": list(self.roles),
            "kind": self.kind,
            "framework": self.framework,
        }


NATIVE = Choice("TrainingJob", "trainguard's TrainingJob", ("worker",), API_VERSION, KIND)
CCE = Choice(
    aitrainingjob.KIND, "CCE's AITrainingJob", ("trainer",), aitrainingjob.API_VERSIONS[0], aitrainingjob.KIND
)
KUBEFLOW = Choice(
    pytorchjob.KIND,
    "Kubeflow's PyTorchJob",
    (pytorchjob.WORKER,),
    pytorchjob.API_VERSIONS[0],
    pytorchjob.KIND,
    FrameworkType.PYTORCH.value,
)
MODELARTS = Choice("ModelArts", "ModelArts' annotations (on a TrainingJob)", ("worker",), API_VERSION, KIND)
CHOICES: tuple[Choice, ...] = (NATIVE, CCE, KUBEFLOW, MODELARTS)


@dataclass(frozen=True)
class RoleSize:
    """A role of the form: its name and sizes as typed (min and max left out: the role is not elastic)."""

    name: str
    replicas: Typed = 1
    min_replicas: Typed = None
    max_replicas: Typed = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "replicas": self.replicas,
            "min": self.min_replicas,
            "max": self.max_replicas,
        }


@dataclass(frozen=True)
class JobForm:
    """What the create page's form holds."""

    dialect: str = NATIVE.key
    name: str = ""
    namespace: str = "default"
    framework: str = FrameworkType.GENERIC.value
    roles: tuple[RoleSize, ...] = (RoleSize("worker"),)
    image: str = ""
    #: The command line, split as a shell splits it (no shell runs it).
    command: str = ""
    working_dir: str = ""
    auto_restart: bool = True
    retries: Typed = DEFAULT_RETRIES
    hang_restart: bool = False
    hang_timeout: Typed = int(HangPolicy().timeout_seconds)
    fault_check: bool = True
    live: bool = False

    @property
    def choice(self) -> Choice:
        for choice in CHOICES:
            if choice.key == self.dialect:
                return choice
        raise PageError(f"dialect {self.dialect!r}: one of {', '.join(c.key for c in CHOICES)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "dialect": self.dialect,
            "name": self.name,
            "namespace": self.namespace,
            "framework": self.framework,
            "roles": [role.to_dict() for role in self.roles],
            "image": self.image,
            "command": self.command,
            "working_dir": self.working_dir,
            "auto_restart": self.auto_restart,
            "retries": self.retries,
            "hang_restart": self.hang_restart,
            "hang_timeout": self.hang_timeout,
            "fault_check": self.fault_check,
            "live": self.live,
        }

    @classmethod
    def from_dict(cls, data: Any) -> JobForm:
        """The form as the page sent it; ``PageError`` for a shape no page sends (not for bad values: those
        are validation's)."""
        if not isinstance(data, Mapping):
            raise PageError("the form must be a JSON object")
        defaults = cls()
        roles = data.get("roles", [role.to_dict() for role in defaults.roles])
        if not isinstance(roles, list) or not roles or not all(isinstance(role, Mapping) for role in roles):
            raise PageError("roles: give at least one role, each {name, replicas, min, max}")
        return cls(
            dialect=_text(data, "dialect", defaults.dialect),
            name=_text(data, "name", defaults.name).strip(),
            namespace=_text(data, "namespace", defaults.namespace).strip(),
            framework=_text(data, "framework", defaults.framework),
            roles=tuple(
                RoleSize(
                    _text(role, "name", "").strip(),
                    _typed(role.get("replicas")),
                    _typed(role.get("min")),
                    _typed(role.get("max")),
                )
                for role in roles
            ),
            image=_text(data, "image", defaults.image).strip(),
            command=_text(data, "command", defaults.command),
            working_dir=_text(data, "working_dir", defaults.working_dir).strip(),
            auto_restart=_flag(data, "auto_restart", defaults.auto_restart),
            retries=_typed(data.get("retries", defaults.retries)),
            hang_restart=_flag(data, "hang_restart", defaults.hang_restart),
            hang_timeout=_typed(data.get("hang_timeout", defaults.hang_timeout)),
            fault_check=_flag(data, "fault_check", defaults.fault_check),
            live=_flag(data, "live", defaults.live),
        )


@dataclass(frozen=True)
class Created:
    """A job a backend took from the page: its name in the pages (``<namespace>/<name>`` on Kubernetes)."""

    key: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.key, "message": self.message}


def defaults(namespace: str) -> JobForm:
    """The form a new page starts with: the native dialect, one worker, auto restart on, the check on."""
    return JobForm(namespace=namespace)


@dataclass(frozen=True)
class Draft:
    """The job the form makes: the document in the dialect, its YAML, and validation's verdict on that YAML."""

    form: JobForm
    document: dict[str, Any]
    text: str
    #: The name problems are reported under, as ``validate`` names the file it reads.
    file: str
    #: ``validate``'s problems, one line each (and a command that cannot be split, which has no field).
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    #: What the dialect cannot say of the form, in words.
    notes: tuple[str, ...] = ()
    loaded: LoadedJob | None = field(default=None, repr=False)

    @property
    def valid(self) -> bool:
        return self.loaded is not None

    @property
    def refusal(self) -> str:
        """Why the job cannot be submitted: validation's problems."""
        return "the job is not valid; nothing was submitted:\n" + "\n".join(self.problems)

    @property
    def job(self) -> LoadedJob:
        """The valid job (``PageError`` with ``refusal`` when it is not)."""
        if self.loaded is None:
            raise PageError(self.refusal)
        return self.loaded

    def to_dict(self) -> dict[str, Any]:
        return {
            "dialect": self.form.dialect,
            "kind": self.form.choice.kind,
            "file": self.file,
            "yaml": self.text,
            "valid": self.valid,
            "problems": list(self.problems),
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }


def draft(form: JobForm) -> Draft:
    """The form as a job of its dialect, checked by the loader ``trainguard validate`` runs."""
    argv, command_problem = _argv(form.command)
    document, notes = write(form, argv)
    text = yaml.safe_dump(document, sort_keys=False, width=110)
    file = f"{form.name or 'job'}.yaml"
    problems: list[str] = [command_problem] if command_problem else []
    try:
        [loaded] = load_bytes(text.encode(), file)
    except SpecError as error:
        return Draft(form, document, text, file, (*problems, *map(str, error.problems)), notes=notes)
    refused = launch_refusal(loaded.job)  # what a backend would refuse it for, as validate says it
    if refused is not None:
        problems.append(f"{file}: {refused}")
    if problems:
        return Draft(form, document, text, file, tuple(problems), loaded.warnings, notes)
    return Draft(form, document, text, file, (), loaded.warnings, notes, loaded)


def write(form: JobForm, argv: list[str]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The job as a document of the form's dialect, and what the dialect cannot say of the form."""
    choice = form.choice
    notes: list[str] = []
    annotations: dict[str, str] = {}
    if not argv:
        notes.append("no command: give the command each pod runs")
    if not form.image:
        notes.append("no image: the local runtime needs none, Kubernetes does")
    container: dict[str, Any] = {"name": pytorchjob.CONTAINER_NAME if choice is KUBEFLOW else CONTAINER}
    if form.image:
        container["image"] = form.image
    if argv:
        container["command"] = argv
    if form.working_dir:
        container["workingDir"] = form.working_dir
    template = {"spec": {"containers": [container]}}
    if choice is KUBEFLOW:
        spec = _kubeflow_spec(form, template, annotations, notes)
    else:
        spec = _native_spec(form, choice, template, annotations)
    if form.live:
        annotations[LIVE_ANNOTATION] = _TRUE
        if (choice.framework or form.framework) != FrameworkType.PYTORCH.value:
            notes.append("live mode runs the workers under torchrun: choose the framework pytorch")
    metadata: dict[str, Any] = {"name": form.name, "namespace": form.namespace}
    if annotations:
        metadata["annotations"] = annotations
    document = {"apiVersion": choice.api_version, "kind": choice.kind, "metadata": metadata, "spec": spec}
    return document, tuple(notes)


def _native_spec(
    form: JobForm, choice: Choice, template: dict[str, Any], annotations: dict[str, str]
) -> dict[str, Any]:
    """trainguard's own form, CCE's (the same fields) or a TrainingJob with ModelArts' annotations."""
    spec: dict[str, Any] = {"frameworkType": form.framework}
    if choice is CCE:
        spec["faultTolerant"] = True
    if choice is MODELARTS:
        _annotate(form, annotations)
    else:
        if form.auto_restart:
            spec["jobRetry"] = {"retryNum": _value(form.retries)}
        if form.hang_restart:
            spec["hang"] = _dropped_none({"enabled": True, "timeoutSeconds": form.hang_timeout})
        spec["faultCheck"] = {"enabled": form.fault_check}
    roles: dict[str, Any] = {}
    for role in form.roles:
        written: dict[str, Any] = {}
        if choice is CCE:
            written["replicaType"] = "master" if role.name.lower() in ("launcher", "master") else "worker"
        written.update(
            _dropped_none(
                {
                    "replicas": role.replicas,
                    "minReplicas": role.min_replicas,
                    "maxReplicas": role.max_replicas,
                }
            )
        )
        written["restartPolicy"] = RestartPolicy.NEVER.value
        written["template"] = template
        roles[role.name] = written
    spec["replicaSpecs"] = roles
    return spec


def _kubeflow_spec(
    form: JobForm, template: dict[str, Any], annotations: dict[str, str], notes: list[str]
) -> dict[str, Any]:
    """Kubeflow's PyTorchJob: its replica types and elasticPolicy; the rest in the annotations any dialect reads."""
    _annotate(form, annotations)
    spec: dict[str, Any] = {}
    replicas: dict[str, Any] = {}
    for role in form.roles:
        is_worker = role.name.lower() == pytorchjob.WORKER.lower()
        if is_worker and (role.min_replicas is not None or role.max_replicas is not None):
            spec["elasticPolicy"] = _dropped_none(
                {"minReplicas": role.min_replicas, "maxReplicas": role.max_replicas}
            )
        elif not is_worker and (role.min_replicas is not None or role.max_replicas is not None):
            notes.append(
                f"a PyTorchJob's {role.name or 'role'} has no min or max (only the Worker is elastic)"
            )
        replicas[role.name] = {
            **_dropped_none({"replicas": role.replicas}),
            "restartPolicy": pytorchjob.KubeflowRestartPolicy.NEVER.value,
            "template": template,
        }
    spec["pytorchReplicaSpecs"] = replicas
    return spec


def _annotate(form: JobForm, annotations: dict[str, str]) -> None:
    """Auto restart, restart upon suspension and the check as the annotations any dialect's job reads."""
    if form.auto_restart:
        annotations[modelarts.JOB_RETRY_NUM] = _annotation(form.retries)
    if form.hang_restart:
        annotations[modelarts.HANG_RETRY] = _TRUE
        if form.hang_timeout is not None:
            annotations[timeouts.HANG_TIMEOUT] = _annotation(form.hang_timeout)
    annotations[FAULT_CHECK_ANNOTATION] = _TRUE if form.fault_check else _FALSE


def _argv(command: str) -> tuple[list[str], str | None]:
    """The command as the words a shell would split it into; a problem when it cannot be split."""
    try:
        return shlex.split(command), None
    except ValueError as error:
        return [], f"command: {error} (close the quote, or escape it with a backslash)"


def _value(typed: Typed) -> Typed:
    """A value left empty stays in the document as empty text, so that validation names the field."""
    return "" if typed is None else typed


def _annotation(typed: Typed) -> str:
    """Annotations are text: the number as written."""
    return "" if typed is None else str(typed)


def _dropped_none(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _typed(value: Any) -> Typed:
    """A number where the page sent one or text that is one; anything else as text; empty as nothing."""
    if value is None or isinstance(value, bool):
        return None if value is None else str(value).lower()
    if isinstance(value, int | float):
        return int(value) if isinstance(value, float) and value.is_integer() else value
    text = str(value).strip()
    if not text:
        return None
    for kind in (int, float):
        try:
            number = kind(text)
        except ValueError:
            continue
        return int(number) if isinstance(number, float) and number.is_integer() else number
    return text


def _text(data: Mapping[str, Any], key: str, default: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise PageError(f"{key} must be text")
    return value


def _flag(data: Mapping[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise PageError(f"{key} must be true or false")
    return value
