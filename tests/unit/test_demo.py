"""The demo's parts that need no running job: the example job it submits, reading the script's progress log,
measuring recoveries from it, and the report. The demo itself runs in tests/integration/torch/test_demo_run.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from trainguard.api import TrainingJob
from trainguard.controller.torchrun_command import render
from trainguard.demo.session import DIGITS_SCRIPT, Event, Recovery, Run, digits_job, recovery
from trainguard.demo.tour import Change, Display, Outcome, report


def _events(*items: tuple[float, str, dict[str, object]]) -> list[Event]:
    return [Event(t, kind, dict(fields)) for t, kind, fields in items]


def test_the_demo_job_is_example_1_with_its_files_under_the_demo_directory(tmp_path: Path) -> None:
    spec = digits_job("demo-run", tmp_path, replicas=3, epochs=4, step_delay=0.1, checkpoint_every=7)
    job = TrainingJob.model_validate(spec)
    worker = job.role("worker")
    assert (worker.replicas, worker.min_count, worker.max_count) == (3, 1, 5)
    assert worker.argv[1] == str(DIGITS_SCRIPT)
    assert f"--checkpoint-dir={tmp_path / 'demo-run' / 'checkpoints'}" in worker.argv
    assert f"--events={tmp_path / 'demo-run' / 'events.jsonl'}" in worker.argv
    assert {"--epochs=4", "--step-delay=0.1", "--checkpoint-every=7"} <= set(worker.argv)
    # a PyTorchJob in the native form: every worker runs torchrun's agent in trainguard's rendezvous
    assert render(job, "worker", "127.0.0.1:1")[1:3] == ["-m", "trainguard.pod.torchrun"]


def test_the_progress_log_is_read_line_by_line_and_a_line_being_written_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    lines = [
        json.dumps({"t": 1.0, "event": "start", "step": 0, "world": 3}),
        json.dumps({"t": 2.0, "event": "step", "step": 1, "world": 3}),
        json.dumps({"t": 3.0, "event": "done", "step": 1, "accuracy": 0.97}),
    ]
    path.write_text("\n".join(lines) + '\n{"t": 4.0, "eve')
    run = Run(path)
    assert [event.event for event in run.events()] == ["start", "step", "done"]
    assert run.last_step() == Event(2.0, "step", {"step": 1, "world": 3})
    assert run.done() is not None
    assert Run(tmp_path / "missing.jsonl").events() == []


def test_a_recovery_is_measured_from_the_fault_to_the_first_step_after_the_restart() -> None:
    events = _events(
        (1.0, "start", {"step": 0, "world": 3}),
        (2.0, "step", {"step": 9, "world": 3}),
        (3.0, "step", {"step": 10, "world": 3}),
        (4.0, "step", {"step": 11, "world": 3}),
        # killed at 4.5; the survivors resume from the checkpoint of step 10
        (6.0, "start", {"step": 10, "world": 2}),
        (6.5, "step", {"step": 11, "world": 2}),
        (20.0, "start", {"step": 30, "world": 3}),
        (20.4, "step", {"step": 31, "world": 3}),
    )
    assert recovery(events, 4.5) == Recovery(4.5, 11, 10, 2, 6.5, 4.0)
    lost = recovery(events, 4.5)
    assert lost is not None
    assert (lost.steps_lost, lost.seconds, lost.paused) == (1, 2.0, 2.5)
    assert recovery(events, 4.5, world=3) == Recovery(4.5, 11, 30, 3, 20.4, 6.5)
    assert recovery(events, 30.0) is None
    unfinished = events[:5]
    assert recovery(unfinished, 4.5) is None  # restarted, no step yet


def test_the_report_puts_both_runs_side_by_side_with_each_recovery_and_the_history() -> None:
    clean = Outcome("without faults", 0.9722, 330, 61.0)
    kill = Recovery(10.0, 44, 40, 2, 14.2, 9.8)
    faulty = Outcome(
        "with faults",
        0.9694,
        331,
        95.0,
        recoveries=[
            Change("kill digits-faults-worker-1", kill, 0.8, {"w0": True, "w2": True}),
            Change("scale to 2", kill, None, {"w0": True, "w1": False}),
        ],
        history=[
            {
                "at": 10.0,
                "kind": "fault",
                "pod": "digits-faults-worker-1",
                "fault": "Exited",
                "rule": "restartPolicy",
                "action": "restart",
                "scope": "Pod",
                "counted": True,
                "recoverySeconds": 3.5,
                "reason": "worker-1 exited with code 137",
            }
        ],
        batches={3: {60}, 4: {60}, 2: {60}},
    )
    text = report(clean, faulty, 170.0)
    assert "0.9722" in text
    assert "0.9694" in text
    assert "kill digits-faults-worker-1" in text
    assert "4.2 s" in text  # to the next step
    assert "0.8 s" in text  # rejoined (its pod's spare took the killed worker's place)
    assert "60 samples a step with 2, 3, 4 workers alike" in text  # the global batch never changed
    assert "restart/Pod" in text
    assert "steps lost (done twice)" in text
    assert "unchanged (2 pods)" in text  # the kill's survivors kept their processes
    assert "1 of 2 restarted" in text


@pytest.mark.parametrize("in_place", [True, False])
def test_the_progress_line_is_redrawn_on_a_terminal_and_sparse_otherwise(
    tmp_path: Path, in_place: bool
) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(
        json.dumps({"t": 1.0, "event": "step", "step": 5, "epoch": 0, "world": 3, "loss": 0.5}) + "\n"
    )
    display = Display(in_place=in_place)
    display.progress.stream = io.StringIO()
    for _ in range(3):
        display.status("with faults", Run(path), 15, "running")
    output = display.progress.stream.getvalue()
    assert "epoch 1/15, step 5, 3 workers" in output
    assert output.count("step 5") == (3 if in_place else 1)
