"""The torchrun part of a pod's launch: how the pods of a PyTorch job start torchrun's elastic agent (the
command and the ``PET_*`` defaults), as a pure function of the job, the role and the rendezvous endpoint.
``trainguard.controller.launchspec`` builds each pod's whole launch from it.

A job uses torchrun when its ``frameworkType`` is ``pytorch`` (every Kubeflow PyTorchJob) or it has an
``elastic`` block (Kubeflow's ``elasticPolicy``), unless the annotation ``trainguard.io/torchrun: "false"``
keeps every command as written. Each role whose command is ``python [-u] SCRIPT ...``, ``python -m MODULE
...``, ``torchrun ...`` or ``python -m torch.distributed.run ...`` then runs one elastic agent per pod, all in
one c10d rendezvous:

- ``--nnodes MIN:MAX``: the sums of ``minReplicas``/``maxReplicas`` over those roles;
- ``--rdzv-backend/--rdzv-endpoint/--rdzv-id``: trainguard's endpoint for the job (or the job's own
  ``rdzvHost``), its uid (or ``rdzvId``); ``--rdzv-conf is_host=false`` when trainguard hosts the store, so
  that no agent ever hosts it and losing any pod never loses the rendezvous;
- ``--nproc-per-node`` and ``--max-restarts``: the job's ``elastic`` block wins, then the command's own flags,
  then trainguard's defaults;
- every other flag of a torchrun command is kept; ``--standalone``, ``--master-addr``, ``--master-port`` and
  ``--node-rank`` (static rendezvous) are dropped.

Workers restart warm (``python -m trainguard.pod.torchrun``, the same agent with torch imported once per pod,
see that module) unless the annotation ``trainguard.io/warm-start: "false"`` is set or the command asks for
``--start-method``, ``--no-python`` or ``--run-path`` itself; then the agent is plain ``torch.distributed.run``.

The environment adds ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (torchrun 2.x shares one store between the
agent and every round of workers without a per-round prefix: a restarted round reads the dead round's gloo
addresses and fails, again and again; with this each round's rank 0 hosts a fresh store) and, for the pods
whose command it does not write (a shell script that starts ``torchrun``; another role of the job), the
``PET_*`` defaults, so that a ``torchrun`` started there joins the same rendezvous. A command it writes carries
every flag itself: the same values again in ``env`` would only make each pod larger.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainguard.api import FrameworkType, TrainingJob
from trainguard.api.model import HangPolicy
from trainguard.pod import contract

TORCHRUN_ANNOTATION = "trainguard.io/torchrun"
#: A job whose script uses ``trainguard.Live``: its workers run under ``trainguard.pod.torchrun --live``, which
#: restarts only a worker that failed; the survivors re-form their group themselves.
LIVE_ANNOTATION = "trainguard.io/live"
WARM_START_ANNOTATION = "trainguard.io/warm-start"
#: The module that runs torchrun's agent with warm worker restarts.
WARM_LAUNCHER = "trainguard.pod.torchrun"
PLAIN_LAUNCHER = "torch.distributed.run"
#: torchrun's own restart budget is spent by every fault anywhere in the job (a peer's death fails this pod's
#: workers too); torchrun's default of 0 would turn each fault into a failure of every pod.
DEFAULT_MAX_RESTARTS = 100
#: The rendezvous settings trainguard starts from; the job's ``rdzvConf`` and the command's override them.
#: A round waits at most ``last_call_timeout`` for more pods once the minimum has joined (torch: 30 s); where
#: trainguard hosts the store it also completes the round as soon as every running pod has joined.
DEFAULT_RDZV_CONF: Mapping[str, str] = {"last_call_timeout": "5"}
DISABLE_SHARED_STORE = {contract.TORCH_DISABLE_SHARE_RDZV_TCP_STORE: "1"}
_PYTHON = re.compile(r"^python[0-9.]*$")
_TORCHRUN_MODULES = frozenset({PLAIN_LAUNCHER, WARM_LAUNCHER})
#: Python options that make no difference to a worker forked from a warm interpreter.
_HARMLESS_PYTHON_FLAGS = frozenset({"-u", "-B"})
#: torchrun's options that take no value; every other option takes one (``--x v`` or ``--x=v``).
_BOOLEAN_FLAGS = frozenset({"--standalone", "--module", "--no-python", "--run-path", "--virtual-local-rank"})
_SHORT_FLAGS = {"-m": "--module", "-r": "--redirects", "-t": "--tee"}
#: Flags trainguard sets itself: the rendezvous and membership, and the static rendezvous it replaces.
_OWNED_FLAGS = frozenset(
    {
        "--nnodes",
        "--rdzv-backend",
        "--rdzv-endpoint",
        "--rdzv-id",
        "--rdzv-conf",
        "--standalone",
        "--master-addr",
        "--master-port",
        "--node-rank",
        "--nproc-per-node",
        "--max-restarts",
    }
)
#: Flags with which a command asks for torchrun's own way of starting workers.
_COLD_START_FLAGS = frozenset({"--start-method", "--no-python", "--run-path"})


class LaunchError(ValueError):
    """A command that looks like torchrun's but cannot be run (no training script)."""


@dataclass(frozen=True)
class Rendezvous:
    """Where a job's torchrun agents meet."""

    backend: str
    endpoint: str
    run_id: str
    #: trainguard runs the store at the endpoint (no agent hosts it).
    hosted: bool


@dataclass(frozen=True)
class TorchrunCommand:
    """A command split into torchrun's part and the training part."""

    python: str
    #: torchrun's options as (canonical name, value or None, the tokens as written).
    flags: tuple[tuple[str, str | None, tuple[str, ...]], ...]
    #: The script (or module, with ``--module`` among the flags) and its arguments.
    target: tuple[str, ...]
    #: Python options before the script of a ``python SCRIPT`` command.
    python_flags: tuple[str, ...] = ()

    def flag(self, name: str) -> str | None:
        """The last value given for ``name`` (``""`` for a boolean flag), or None."""
        found = None
        for canonical, value, _ in self.flags:
            if canonical == name:
                found = "" if value is None else value
        return found


# ---- which jobs and roles ----------------------------------------------------------------------------


def uses_torchrun(job: TrainingJob) -> bool:
    if job.metadata.annotations.get(TORCHRUN_ANNOTATION, "").lower() == "false":
        return False
    return job.spec.framework_type is FrameworkType.PYTORCH or job.spec.elastic is not None


def asks_for_live(job: TrainingJob) -> bool:
    return uses_torchrun(job) and job.metadata.annotations.get(LIVE_ANNOTATION, "").lower() == "true"


def is_live(job: TrainingJob) -> bool:
    """The job runs in live mode: it asks for it, and nothing of its own would end the survivors of a fault
    (``live_refusal``)."""
    return asks_for_live(job) and live_refusal(job) is None


def live_refusal(job: TrainingJob) -> str | None:
    """Why a job that asks for live mode runs without it: a container of a torchrun role that sets NCCL's error
    handling to a mode that ends the survivors of a fault (``contract.nccl_refusal``); None where nothing does."""
    for role in torchrun_roles(job):
        spec = job.role(role).template.get("spec") or {}
        for container in (spec.get("containers") or ()) if isinstance(spec, dict) else ():
            env = {
                str(var.get("name")): str(var.get("value", ""))
                for var in (container.get("env") or ())
                if isinstance(container, dict)
                if isinstance(var, dict)
            }
            why = contract.nccl_refusal(env)
            if why is not None:
                return f"replicaSpecs.{role} container {container.get('name', '?')}: {why}"
    return None


#: The shortest bound live mode gives a collective: under it, a slow step (a checkpoint's save, a long
#: evaluation on one rank) would be taken for a fault.
LIVE_MIN_TIMEOUT = 10.0


def check_live(job: TrainingJob) -> None:
    """``LaunchError`` for a live job whose one timeout (``live_timeout``) is too short to tell a fault from a
    slow step."""
    if not asks_for_live(job):
        return
    timeout = live_timeout(job)
    if timeout < LIVE_MIN_TIMEOUT:
        raise LaunchError(
            f"spec.hang.timeoutSeconds: {timeout:g} s is too short for live mode ({LIVE_ANNOTATION}), which bounds "
            f"every collective by it: a step that takes longer (a checkpoint's save, an evaluation) would be "
            f"taken for a fault; give at least {LIVE_MIN_TIMEOUT:g}"
        )


def live_timeout(job: TrainingJob) -> float:
    """A live job's one timeout: its hang detection's (``hang.timeoutSeconds``, ModelArts' suspension) bounds
    its collectives too (on or off: ``trainguard.io/hang-timeout-seconds`` sets it alone); a job without a hang
    block gets that block's default. A dead or silent member is found
    by its beats in seconds, whatever this is; the bound is for a member that beats but does not progress."""
    hang = job.spec.hang
    return hang.timeout_seconds if hang is not None else HangPolicy().timeout_seconds


def rendezvous(job: TrainingJob, endpoint: str) -> Rendezvous | None:
    """The job's rendezvous at trainguard's ``endpoint`` (``host:port``), or at the job's own ``rdzvHost``;
    None when the job does not use torchrun."""
    if not uses_torchrun(job):
        return None
    elastic = job.spec.elastic
    backend = elastic.rdzv_backend if elastic else "c10d"
    run_id = (elastic.rdzv_id if elastic else None) or job.metadata.uid or job.name
    if elastic is not None and elastic.rdzv_host:
        port = elastic.rdzv_port or 29400
        return Rendezvous(backend, f"{elastic.rdzv_host}:{port}", run_id, hosted=False)
    return Rendezvous(backend, endpoint, run_id, hosted=backend == "c10d")


def torchrun_roles(job: TrainingJob) -> tuple[str, ...]:
    """The roles whose pods join the rendezvous: a recognised command, or one that mentions torchrun."""
    if not uses_torchrun(job):
        return ()
    roles = []
    for name, spec in job.spec.replica_specs.items():
        argv = spec.argv
        try:
            recognised = parse(argv) is not None
        except LaunchError:  # torchrun's, though it cannot run: the pod's start will say why
            recognised = True
        if recognised or any("torchrun" in part or PLAIN_LAUNCHER in part for part in argv):
            roles.append(name)
    return tuple(roles)


def nnodes(job: TrainingJob) -> tuple[int, int]:
    """(min, max) agents in the rendezvous: one per pod of every torchrun role."""
    roles = [job.spec.replica_specs[name] for name in torchrun_roles(job)]
    return sum(spec.min_count for spec in roles), sum(spec.max_count for spec in roles)


# ---- the environment ---------------------------------------------------------------------------------


def torchrun_env(job: TrainingJob, endpoint: str, role: str | None = None) -> dict[str, str]:
    """The store fix and trainguard's own settings for every pod of a torchrun job, and the ``PET_*`` defaults
    (torchrun reads ``PET_<OPTION>`` as the default of ``--<option>``) where torchrun has no flags of ours to
    read: in every pod but those of ``role`` when ``render`` writes that role's command (``writes_command``),
    flags and all. Empty for other jobs."""
    rdzv = rendezvous(job, endpoint)
    if rdzv is None:
        return {}
    low, high = nnodes(job)
    elastic = job.spec.elastic
    env = {**DISABLE_SHARED_STORE}
    if role is None or not writes_command(job, role):
        env |= {
            contract.PET_RDZV_BACKEND: rdzv.backend,
            contract.PET_RDZV_ENDPOINT: rdzv.endpoint,
            contract.PET_RDZV_ID: rdzv.run_id,
            contract.PET_RDZV_CONF: _conf_text(_rdzv_conf(job, rdzv, {})),
            contract.PET_NNODES: f"{max(low, 1)}:{max(high, 1)}",
            contract.PET_NPROC_PER_NODE: str(elastic.n_proc_per_node) if elastic else "1",
            contract.PET_MAX_RESTARTS: str(_max_restarts(job, None)),
        }
    env[contract.ENV_RDZV_POLL_SECONDS] = f"{poll_seconds(high):g}"
    if is_live(job):
        nproc = elastic.n_proc_per_node if elastic else 1
        roles = [job.spec.replica_specs[name] for name in torchrun_roles(job)]
        env[contract.ENV_LIVE_SIZE] = str(max(sum(spec.replicas for spec in roles), 1) * nproc)
        env[contract.ENV_LIVE_MINIMUM] = str(max(low, 1) * nproc)
        env[contract.ENV_LIVE_TIMEOUT] = f"{live_timeout(job):g}"
    return env


def poll_seconds(max_nodes: int) -> float:
    """How often each agent polls the rendezvous store while it waits (torch: 1 s; ``trainguard.pod.torchrun``
    reads it): scaled with the job's size so that all agents together look about 50 times a second, 0.1 s up to
    5 pods, 1 s from 50."""
    return round(min(1.0, max(0.1, 0.02 * max_nodes)), 2)


# ---- the command -------------------------------------------------------------------------------------


def writes_command(job: TrainingJob, role: str) -> bool:
    """Whether ``render`` writes the command of ``role``'s pods: torchrun started with every rendezvous flag
    of ours (a command torchrun's or Python's that it recognises). Not for a command that only mentions
    torchrun (a shell script that starts it): that one runs as written, and its torchrun reads ``PET_*``."""
    if not uses_torchrun(job):
        return False
    try:
        return parse(job.role(role).argv) is not None
    except LaunchError:  # render refuses it, naming the field
        return False


def render(job: TrainingJob, role: str, endpoint: str, argv: Sequence[str] | None = None) -> list[str]:
    """The command a pod of ``role`` runs: its ``argv`` (default: the role's command + args) started under
    torchrun's elastic agent in the job's rendezvous; unchanged when the job or the command is not torchrun's."""
    argv = list(job.role(role).argv if argv is None else argv)
    rdzv = rendezvous(job, endpoint)
    try:
        command = parse(argv) if rdzv is not None else None
    except LaunchError as error:
        field = f"spec.replicaSpecs.{role}.template.spec.containers[0].command"
        raise LaunchError(f"{field}: {error}, e.g. [torchrun, train.py] or [python, train.py]") from None
    if rdzv is None or command is None:
        return argv
    user_conf = _parse_conf(command.flag("--rdzv-conf") or "")
    low, high = nnodes(job)
    own = _template_defaults(job, role)
    nproc = _nproc(job, command.flag("--nproc-per-node") or own.get(contract.PET_NPROC_PER_NODE))
    restarts = _max_restarts(job, command.flag("--max-restarts") or own.get(contract.PET_MAX_RESTARTS))
    ours = [
        ("--nnodes", f"{max(low, 1)}:{max(high, 1)}"),
        ("--nproc-per-node", nproc),
        ("--max-restarts", str(restarts)),
        ("--rdzv-backend", rdzv.backend),
        ("--rdzv-endpoint", rdzv.endpoint),
        ("--rdzv-id", rdzv.run_id),
        ("--rdzv-conf", _conf_text(_rdzv_conf(job, rdzv, user_conf))),
    ]
    kept = [token for name, _, tokens in command.flags if name not in _OWNED_FLAGS for token in tokens]
    cold = any(name in _COLD_START_FLAGS for name, _, _ in command.flags)
    warm = (
        not cold
        and not set(command.python_flags) - _HARMLESS_PYTHON_FLAGS
        and job.metadata.annotations.get(WARM_START_ANNOTATION, "").lower() != "false"
    )
    target = list(command.target)
    if set(command.python_flags) - _HARMLESS_PYTHON_FLAGS:
        # Options torchrun cannot pass on: the interpreter itself, with them, is the worker's command.
        module = command.flag("--module") is not None
        kept = [token for token in kept if token not in ("-m", "--module")] + ["--no-python"]
        target = [command.python, *command.python_flags, *(["-m"] if module else []), *target]
    launcher = WARM_LAUNCHER if warm or is_live(job) else PLAIN_LAUNCHER
    rendered = [command.python, "-m", launcher, *(["--live"] if is_live(job) else [])]
    for name, value in ours:
        rendered += [name, value]
    return [*rendered, *kept, *target]


def parse(argv: Sequence[str]) -> TorchrunCommand | None:
    """Split a python or torchrun command; None for anything else (a shell, a binary, an empty command)."""
    if not argv:
        return None
    program = posixpath.basename(argv[0])
    if program == "torchrun":
        return _parse_torchrun("python", list(argv[1:]))
    if not _PYTHON.match(program):
        return None
    rest = list(argv[1:])
    python_flags: list[str] = []
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-", "-c"):
        flag = rest.pop(0)
        python_flags.append(flag)
        if flag in ("-W", "-X") and rest:  # options with a value
            python_flags.append(rest.pop(0))
    if not rest or rest[0] in ("-", "-c"):
        return None  # a REPL, stdin or inline code: nothing to hand to torchrun
    if rest[0] == "-m":
        if len(rest) < 2:
            return None
        if rest[1] in _TORCHRUN_MODULES:
            return _parse_torchrun(argv[0], rest[2:])
        module_flag = ("--module", None, ("-m",))
        return TorchrunCommand(argv[0], (module_flag,), tuple(rest[1:]), tuple(python_flags))
    return TorchrunCommand(argv[0], (), tuple(rest), tuple(python_flags))


def _parse_torchrun(python: str, tokens: list[str]) -> TorchrunCommand:
    flags: list[tuple[str, str | None, tuple[str, ...]]] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == "--":
            index += 1
            break
        if not token.startswith("-") or token == "-":
            break
        name, equals, value = token.partition("=")
        short = name[:2] if not name.startswith("--") else None
        if short in ("-r", "-t") and len(name) > 2 and not equals:  # -r3: a short option with its value
            flags.append((_SHORT_FLAGS[short], name[2:], (token,)))
            index += 1
            continue
        canonical = _canonical(name)
        if canonical in _BOOLEAN_FLAGS:
            flags.append((canonical, None, (token,)))
            index += 1
        elif equals:
            flags.append((canonical, value, (token,)))
            index += 1
        elif index + 1 < len(tokens):
            flags.append((canonical, tokens[index + 1], (token, tokens[index + 1])))
            index += 2
        else:
            raise LaunchError(f"torchrun option {token} has no value")
    target = tuple(tokens[index:])
    if not target:
        raise LaunchError("a torchrun command needs the training script (or -m MODULE) after its options")
    return TorchrunCommand(python, tuple(flags), target)


def _canonical(name: str) -> str:
    if name in _SHORT_FLAGS:
        return _SHORT_FLAGS[name]
    return "--" + name.lstrip("-").replace("_", "-")


# ---- values --------------------------------------------------------------------------------------------


def _template_defaults(job: TrainingJob, role: str) -> dict[str, str]:
    """The ``PET_*`` values the role's container sets itself, as torchrun would read them (the last of equal
    names wins, as in Kubernetes): a command written with our flags keeps what they asked for."""
    env = job.role(role).container.get("env") or []
    return {
        str(item["name"]): str(item["value"])
        for item in env
        if isinstance(item, dict) and str(item.get("name", "")).startswith("PET_") and "value" in item
    }


def _nproc(job: TrainingJob, from_command: str | None) -> str:
    """The job's nProcPerNode when it says more than the default 1, else the command's, else 1."""
    elastic = job.spec.elastic
    from_spec = str(elastic.n_proc_per_node) if elastic is not None else None
    if from_spec not in (None, "1"):
        return str(from_spec)
    return from_command or from_spec or "1"


def _max_restarts(job: TrainingJob, from_command: str | None) -> int:
    elastic = job.spec.elastic
    if elastic is not None and elastic.max_restarts is not None:
        return elastic.max_restarts
    if from_command is not None and from_command.strip().isdigit():
        return int(from_command)
    return DEFAULT_MAX_RESTARTS


def _rdzv_conf(job: TrainingJob, rdzv: Rendezvous, from_command: Mapping[str, str]) -> dict[str, str]:
    """trainguard's defaults, then the command's ``--rdzv-conf``, then the job's ``rdzvConf``; ``is_host`` is
    trainguard's wherever it hosts the store."""
    conf = {**DEFAULT_RDZV_CONF, **from_command}
    if job.spec.elastic is not None:
        conf.update(job.spec.elastic.rdzv_conf)
    if rdzv.hosted:
        conf["is_host"] = "false"
    return conf


def _parse_conf(text: str) -> dict[str, str]:
    """torchrun's ``k1=v1,k2=v2``."""
    conf = {}
    for item in text.split(","):
        key, equals, value = item.partition("=")
        if equals and key.strip():
            conf[key.strip()] = value.strip()
    return conf


def _conf_text(conf: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in conf.items())
