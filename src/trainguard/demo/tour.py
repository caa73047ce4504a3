"""The demo: example 1 (data-parallel digits classification on gloo) trained twice on this machine, first
without faults, then with 3 workers through a kill, a scale-out to 4 and a scale-in to 2; then the two final
accuracies side by side, the steps lost, each recovery's duration, whether the survivors kept their processes,
and trainguard's fault-recovery history. The job runs in live mode (``trainguard.Live``: the survivors keep
training in their processes) unless ``--torchrun`` asks for torchrun's way (every worker restarted).

Everything runs in a private ``TRAINGUARD_HOME`` under a temporary directory (``--keep`` keeps it, with the
pods' logs and the checkpoints), so the demo never touches the user's jobs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trainguard.backends.local import views
from trainguard.cli.progress import Progress
from trainguard.demo.session import Event, Recovery, Run, Session, Timeout, digits_job, recovery

ROLE = "worker"
#: How long one phase may take on a busy machine before the demo gives up (a cold pod start imports torch).
PHASE_TIMEOUT = 240.0


@dataclass(frozen=True)
class Settings:
    epochs: int = 15
    step_delay: float = 0.08
    checkpoint_every: int = 20
    #: Steps reached before each fault: the kill, the scale-out, the scale-in.
    kill_at: int = 40
    scale_out_at: int = 100
    scale_in_at: int = 170
    #: Live mode (the survivors keep their processes); False: torchrun restarts every worker.
    live: bool = True
    #: Live mode's hot spares per pod in the run with faults (``trainguard.io/live-spares``): a killed worker's
    #: place is taken by its pod's spare, warm, instead of a process started cold.
    spares: int = 1
    #: Samples a step over all ranks: every world of the run (2 to 4) divides it, so it never changes.
    global_batch: int = 60


@dataclass(frozen=True)
class Change:
    """A fault or resize of the run with faults, and what it cost."""

    what: str
    recovery: Recovery
    #: For the kill: seconds until the replacement trained with the others.
    rejoined: float | None
    #: The pods that lived through it, and whether each kept its training processes (same pids).
    survivors_kept: dict[str, bool]


@dataclass
class Outcome:
    name: str
    accuracy: float
    steps: int
    seconds: float
    recoveries: list[Change] = field(default_factory=list)
    history: list[dict[str, object]] = field(default_factory=list)
    #: The global batches trained, by world size (from rank 0's steps; live mode writes them).
    batches: dict[int, set[int]] = field(default_factory=dict)


class Display:
    """One line per run redrawn in place on a terminal; elsewhere a plain line now and then, and every note."""

    def __init__(self, in_place: bool | None = None) -> None:
        self.progress = Progress(in_place=in_place)
        self._last_plain = 0.0

    def status(self, title: str, run: Run, epochs: int, doing: str) -> None:
        last = run.last_step()
        if last is None:
            text = f"{title}: starting the pods (each imports torch; the first step takes a while)"
        else:
            epoch = int(last.fields.get("epoch", 0)) + 1
            loss = last.fields.get("loss")
            text = f"{title}: epoch {epoch}/{epochs}, step {last.step}, {last.world} workers, loss {loss}"
        if doing:
            text += f" - {doing}"
        if self.progress.in_place or time.monotonic() - self._last_plain >= 10:
            self._last_plain = time.monotonic()
            self.progress.update(text)

    def note(self, line: str) -> None:
        self.progress.note(line)

    def close(self) -> None:
        self.progress.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trainguard demo", description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the demo's directory (logs, checkpoints)")
    parser.add_argument("--epochs", type=int, default=Settings.epochs, help="epochs of each run")
    parser.add_argument(
        "--torchrun",
        action="store_true",
        help="recover torchrun's way (every worker restarted on each change) instead of live mode",
    )
    args = parser.parse_args(argv)
    settings = Settings(epochs=args.epochs, live=not args.torchrun)
    root = Path(tempfile.mkdtemp(prefix="trainguard-demo-"))
    display = Display()
    print(
        "trainguard demo: example 1 (examples/digits: DDP on scikit-learn's digits, gloo on CPU), 3 workers\n"
        + (
            "in live mode (the survivors of a change keep training in their processes),"
            if settings.live
            else "under torchrun's elastic agent,"
        )
        + " trained twice: without faults, then through a kill and two resizes.\n"
        f"Everything runs in {root} (a private TRAINGUARD_HOME); it takes a few minutes.\n",
        flush=True,
    )
    started = time.monotonic()
    try:
        with Session(root) as session:
            clean = train(session, "digits-clean", settings, display, faults=False)
            faulty = train(session, "digits-faults", settings, display, faults=True)
    except (Timeout, RuntimeError) as error:
        display.close()
        print(f"\nthe demo stopped: {error}\nits files are in {root}", file=sys.stderr)
        return 1
    display.close()
    print(report(clean, faulty, time.monotonic() - started))
    if args.keep:
        print(f"\nlogs, checkpoints and progress files: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if faulty.accuracy >= 0.95 else 1


def train(session: Session, name: str, settings: Settings, display: Display, *, faults: bool) -> Outcome:
    title = "with faults" if faults else "without faults"
    spec = digits_job(
        name,
        session.root,
        replicas=3,
        epochs=settings.epochs,
        step_delay=settings.step_delay,
        checkpoint_every=settings.checkpoint_every,
        extra_args=(f"--global-batch={settings.global_batch}",),
        live=settings.live,
        spares=settings.spares if faults and settings.live else 0,
    )
    began = time.monotonic()
    job = session.submit(spec)
    run = session.run(job)
    display.note(f"[{title}] $ trainguard run {name}.yaml   # 3 workers, elastic 1..5")
    outcome = Outcome(title, 0.0, 0, 0.0)

    def tick(doing: str = "") -> Callable[[], None]:
        def show() -> None:
            display.status(title, run, settings.epochs, doing)
            if session.phase(job) in ("Failed", "Timeout"):
                raise RuntimeError(f"job {job} {session.phase(job).lower()}; see {session.home.root}")

        return show

    if faults:
        outcome.recoveries = inject_faults(session, job, run, settings, display, tick)
    done = session.wait("the end of training", run.done, PHASE_TIMEOUT * 2, tick=tick("training"), poll=0.3)
    session.wait(f"job {job} to succeed", lambda: session.phase(job) == "Succeeded", 60, tick=tick())
    outcome.accuracy = float(done.fields["accuracy"])
    outcome.steps = done.step
    outcome.seconds = time.monotonic() - began
    outcome.history = list(session.view(job)["status"]["history"])
    for step in run.steps():
        if "batch" in step.fields:
            outcome.batches.setdefault(step.world, set()).add(int(step.fields["batch"]))
    display.note(f"[{title}] done: test accuracy {outcome.accuracy:.4f} after {done.step} steps")
    return outcome


def inject_faults(
    session: Session,
    job: str,
    run: Run,
    settings: Settings,
    display: Display,
    tick: Callable[[str], Callable[[], None]],
) -> list[Change]:
    """Kill a worker, scale to 4, scale to 2, each once the previous change has settled; returns each
    change with its recovery, for the kill when the replacement joined, and whether the pods that lived
    through it kept their training processes."""

    def reached(step: int) -> Callable[[], Event | None]:
        return lambda: next((e for e in run.steps() if e.step >= step), None)

    def settled(world: int, after: float) -> Callable[[], Event | None]:
        return lambda: next((e for e in run.steps() if e.t > after and e.world == world), None)

    def kept(before: dict[str, tuple[int, ...]]) -> dict[str, bool]:
        after = session.worker_pids(job)
        return {pod: after.get(pod) == pids for pod, pids in before.items() if pod in after}

    results: list[Change] = []
    session.wait(f"step {settings.kill_at}", reached(settings.kill_at), PHASE_TIMEOUT, tick=tick("running"))
    pod = f"{job}-{ROLE}-1"
    spare = settings.live and settings.spares > 0
    if spare:  # the pod's spare warm and waiting before the kill (its agent's word, in the job's status)
        session.wait(
            f"{pod}'s spare", lambda: _spares_ready(session, job, pod), PHASE_TIMEOUT, tick=tick("running")
        )
    before = {name: pids for name, pids in session.worker_pids(job).items() if name != pod}
    if spare:
        session.chaos("kill", pod, worker=True)
        display.note(
            f"[with faults] $ trainguard chaos kill {pod} --worker   # SIGKILL of its training process; "
            "the pod's spare takes its place"
        )
    else:
        session.chaos("kill", pod)
        display.note(
            f"[with faults] $ trainguard chaos kill {pod}   # SIGKILL of its torchrun agent and worker"
        )
    killed = time.time()
    back = session.wait(
        "the survivors", lambda: recovery(run.events(), killed), PHASE_TIMEOUT, tick=tick("recovering")
    )
    display.note(f"[with faults]   training went on after {back.seconds:.1f} s with {back.world} workers")
    how = "its spare, warm, takes over" if spare else "restarts (a cold start)"
    rejoined = session.wait("the replacement", settled(3, killed), PHASE_TIMEOUT, tick=tick(f"{pod} {how}"))
    display.note(
        f"[with faults]   {pod} rejoined {rejoined.t - killed:.1f} s after the kill"
        + (" (its spare took the killed worker's place; a new spare starts behind it)" if spare else "")
    )
    results.append(Change(f"kill {pod}", back, rejoined.t - killed, kept(before)))

    for world, at_step in ((4, settings.scale_out_at), (2, settings.scale_in_at)):
        session.wait(f"step {at_step}", reached(at_step), PHASE_TIMEOUT, tick=tick("running"))
        before = session.worker_pids(job)
        session.scale(job, ROLE, world)
        asked = time.time()
        display.note(f"[with faults] $ trainguard scale {job} --role {ROLE} --replicas {world}")
        session.wait(
            f"{world} workers", settled(world, asked), PHASE_TIMEOUT, tick=tick(f"scaling to {world}")
        )
        resized = recovery(run.events(), asked, world=world)
        if resized is not None:
            display.note(f"[with faults]   {world} workers train {resized.seconds:.0f} s after the request")
            results.append(Change(f"scale to {world}", resized, None, kept(before)))
    return results


def _spares_ready(session: Session, job: str, pod: str) -> bool:
    return any(p["name"] == pod and p.get("spares") for p in session.view(job)["status"]["pods"])


def batches(seen: dict[int, set[int]]) -> str:
    """The global batches trained, in words: one for every world, or each world's."""
    every = set().union(*seen.values()) if seen else set()
    worlds = ", ".join(str(world) for world in sorted(seen))
    if len(every) == 1:
        return f"{every.pop()} samples a step with {worlds} workers alike"
    return "; ".join(f"{world} workers: {sorted(sizes)}" for world, sizes in sorted(seen.items())) or "-"


def survivors(kept: dict[str, bool]) -> str:
    if not kept:
        return "-"
    same = sum(kept.values())
    return f"unchanged ({same} pods)" if same == len(kept) else f"{len(kept) - same} of {len(kept)} restarted"


def report(clean: Outcome, faulty: Outcome, seconds: float) -> str:
    lost = sum(change.recovery.steps_lost for change in faulty.recoveries)
    lines = [
        "",
        "Results",
        views.table(
            [
                ["test accuracy", f"{clean.accuracy:.4f}", f"{faulty.accuracy:.4f}"],
                ["steps", clean.steps, faulty.steps],
                ["steps lost (done twice)", 0, lost],
                ["wall time", f"{clean.seconds:.0f} s", f"{faulty.seconds:.0f} s"],
                ["global batch", batches(clean.batches), batches(faulty.batches)],
            ],
            ["", "WITHOUT FAULTS", "WITH FAULTS"],
        ),
        "",
        "Recoveries (from rank 0's progress log)",
        views.table(
            [
                [
                    change.what,
                    change.recovery.step_before,
                    change.recovery.resumed_from,
                    change.recovery.steps_lost,
                    f"{change.recovery.seconds:.1f} s",
                    f"{change.recovery.paused:.1f} s",
                    change.recovery.world,
                    "-" if change.rejoined is None else f"{change.rejoined:.1f} s",
                    survivors(change.survivors_kept),
                ]
                for change in faulty.recoveries
            ],
            [
                "CHANGE",
                "LAST STEP",
                "RESUMED AT",
                "LOST",
                "TO NEXT STEP",
                "PAUSED",
                "WORKERS",
                "REJOINED",
                "SURVIVORS' PIDS",
            ],
        ),
        "  TO NEXT STEP: from the fault or request to the first step after the restart; PAUSED: how long no",
        "  step completed around it (a resize keeps training until the new pod is ready); SURVIVORS' PIDS:",
        "  whether the pods that lived through the change kept their training processes.",
        "",
        "Fault-recovery history (trainguard describe digits-faults)",
        views.history_table(faulty.history),
        "",
        f"demo finished in {seconds:.0f} s",
    ]
    return "\n".join(lines)
