"""Running the example jobs on a private local runtime, and reading how they train.

A ``Session`` owns a ``TRAINGUARD_HOME`` of its own (so its control plane, nodes and jobs never meet the
user's) and talks to its control plane through the local API, as the CLI does. The digits example's script
writes its progress as JSON lines (``--events``); ``Run`` reads them back, and ``recovery`` turns them into
what a user asks after a fault: how long until training went on, and how many steps were done twice.

The demo, the PyTorch integration tests and ``benchmarks/recovery.py`` all drive jobs this way.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainguard.api.load import load_jobs
from trainguard.backends.local.client import Client, ClientError, control_plane_pid
from trainguard.backends.local.home import Home

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
DIGITS_JOB = EXAMPLES / "digits" / "digits.yaml"
DIGITS_SCRIPT = EXAMPLES / "digits" / "train_digits.py"


class Timeout(AssertionError):
    """A wait ran past its deadline; the message says what was awaited and what was seen."""


def digits_job(
    name: str,
    root: Path,
    *,
    replicas: int = 3,
    epochs: int | None = None,
    step_delay: float = 0.0,
    checkpoint_every: int = 20,
    extra_args: tuple[str, ...] = (),
    live: bool = False,
    spares: int = 0,
) -> dict[str, Any]:
    """Example 1 in trainguard's native form, named ``name``, writing its checkpoints and progress under
    ``root`` (absolute paths, so that it does not matter where pods run); ``spares``: hot spares per pod (live
    mode)."""
    [loaded] = load_jobs(DIGITS_JOB)
    spec = loaded.job.to_dict()
    spec["metadata"]["name"] = name
    worker = spec["spec"]["replicaSpecs"]["worker"]
    worker["replicas"] = replicas
    container = worker["template"]["spec"]["containers"][0]
    container["command"] = [sys.executable, str(DIGITS_SCRIPT)]  # this interpreter: it has torch
    args = [
        f"--checkpoint-dir={root / name / 'checkpoints'}",
        f"--checkpoint-every={checkpoint_every}",
        f"--events={events_file(root, name)}",
        f"--step-delay={step_delay:g}",
        *([f"--epochs={epochs}"] if epochs is not None else []),
        *(["--live"] if live else []),
        *extra_args,
    ]
    container["args"] = args
    if live:
        spec["metadata"].setdefault("annotations", {})["trainguard.io/live"] = "true"
    if spares:
        spec["metadata"].setdefault("annotations", {})["trainguard.io/live-spares"] = str(spares)
    return spec


def events_file(root: Path, name: str) -> Path:
    return root / name / "events.jsonl"


@dataclass(frozen=True)
class Event:
    """One line of the script's ``--events`` file."""

    t: float
    event: str
    fields: dict[str, Any]

    @property
    def step(self) -> int:
        return int(self.fields.get("step", 0))

    @property
    def world(self) -> int:
        return int(self.fields.get("world", 0))


class Run:
    """A job's progress as its rank 0 reported it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self) -> list[Event]:
        found = []
        with contextlib.suppress(FileNotFoundError), open(self.path) as handle:
            for line in handle:
                with contextlib.suppress(ValueError):  # a line being written
                    data = json.loads(line)
                    found.append(Event(float(data.pop("t")), str(data.pop("event")), data))
        return found

    def steps(self) -> list[Event]:
        return [event for event in self.events() if event.event == "step"]

    def last_step(self) -> Event | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def done(self) -> Event | None:
        return next((event for event in self.events() if event.event == "done"), None)


@dataclass(frozen=True)
class Recovery:
    """What a fault (or a resize) at ``at`` cost: until a step completed again, and the steps done twice."""

    at: float
    #: The last step completed before the workers restarted.
    step_before: int
    #: The step training resumed from (its checkpoint), and the world it resumed with.
    resumed_from: int
    world: int
    #: When the first step after resuming completed.
    next_step_at: float
    #: When the last step before the restart completed.
    last_step_at: float | None = None

    @property
    def seconds(self) -> float:
        return self.next_step_at - self.at

    @property
    def paused(self) -> float:
        """How long no step completed: from the last one before the restart to the first one after it."""
        return self.next_step_at - (self.last_step_at if self.last_step_at is not None else self.at)

    @property
    def steps_lost(self) -> int:
        return max(0, self.step_before - self.resumed_from)


def recovery(events: list[Event], at: float, *, world: int | None = None) -> Recovery | None:
    """The recovery from a fault (or a resize) at ``at``: the first restart of the workers after it (with
    ``world`` workers, if given) and the first step it completed; None until there is one. Steps lost are those
    completed before that restart and done again after it."""
    for index, start in enumerate(events):
        if start.event != "start" or start.t <= at or (world is not None and start.world != world):
            continue
        step = next((event for event in events[index + 1 :] if event.event == "step"), None)
        if step is None:
            return None
        before = [event for event in events[:index] if event.event == "step"]
        highest = max((event.step for event in before), default=0)
        return Recovery(at, highest, start.step, start.world, step.t, before[-1].t if before else None)
    return None


class Session:
    """A private local runtime rooted at ``root``: its home, and the job files and outputs under it."""

    def __init__(self, root: Path) -> None:
        self.root = root.absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        self.home = Home(self.root / "home")
        self._client: Client | None = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, op: str, **args: Any) -> Any:
        if self._client is None:
            self._client = Client(self.home)
        return self._client.call(op, **args)

    def submit(self, spec: dict[str, Any], nodes: int | None = None) -> str:
        """Submit a native job (as ``trainguard run --detach`` does, from ``root``); returns its name."""
        path = self.root / f"{spec['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        result = self.call("submit", spec=spec, workdir=str(self.root), nodes=nodes, source=str(path))
        return str(result["name"])

    def view(self, job: str) -> dict[str, Any]:
        return dict(self.call("get", job=job))

    def pods(self, job: str) -> dict[str, dict[str, Any]]:
        return {pod["name"]: pod for pod in self.view(job)["status"]["pods"]}

    def worker_pids(self, job: str) -> dict[str, tuple[int, ...]]:
        """Each running pod's training processes (under its agent's command), by pod."""
        import psutil

        from trainguard.agent.nudge import workers

        found: dict[str, tuple[int, ...]] = {}
        for name, pod in self.pods(job).items():
            if pod.get("phase") != "Running" or not pod.get("pid"):
                continue
            try:
                commands = psutil.Process(pod["pid"]).children()
            except psutil.Error:
                continue
            found[name] = tuple(sorted(w.pid for c in commands for w in workers(c.pid)))
        return found

    def chaos(self, action: str, target: str, **args: Any) -> str:
        return str(self.call("chaos", action=action, target=target, **args))

    def scale(self, job: str, role: str, replicas: int) -> None:
        self.call("scale", job=job, role=role, replicas=replicas)

    def run(self, job: str) -> Run:
        return Run(events_file(self.root, job))

    def wait(
        self,
        what: str,
        condition: Callable[[], Any],
        timeout: float,
        *,
        tick: Callable[[], None] | None = None,
        poll: float = 0.1,
    ) -> Any:
        """``condition()`` once it is true; ``Timeout`` naming ``what`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            result = condition()
            if result:
                return result
            if tick is not None:
                tick()
            if time.monotonic() > deadline:
                raise Timeout(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(poll)

    def phase(self, job: str) -> str:
        return str(self.view(job)["status"]["phase"])

    def close(self) -> None:
        """Stop the control plane and every pod of this session."""
        if control_plane_pid(self.home) is not None:
            with contextlib.suppress(ClientError, OSError), Client(self.home, start=False) as client:
                client.call("shutdown", stop_pods=True)
            deadline = time.monotonic() + 30
            while control_plane_pid(self.home) is not None and time.monotonic() < deadline:
                time.sleep(0.05)
        if self._client is not None:
            self._client.close()
            self._client = None
