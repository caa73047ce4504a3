"""Progress of waiting commands: redrawn in place on a terminal, one plain line per change otherwise."""

from __future__ import annotations

import io
from typing import Any

import pytest

from trainguard.cli.errors import CliError
from trainguard.cli.progress import Progress, wait_until
from trainguard.cli.verbs.scale import settled


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_plain_output_prints_each_change_once_and_never_redraws() -> None:
    out = io.StringIO()
    progress = Progress(out, in_place=False)
    for text in ("1/3 running", "1/3 running", "2/3 running", "3/3 running"):
        progress.update(text)
    progress.note("event: pod started")
    assert out.getvalue() == "1/3 running\n2/3 running\n3/3 running\nevent: pod started\n"
    assert "\x1b" not in out.getvalue()


def test_a_terminal_gets_the_block_redrawn_in_place_with_the_time_waited() -> None:
    out, clock = io.StringIO(), FakeClock()
    progress = Progress(out, in_place=True, clock=clock)
    progress.update("1/3 running\n2 starting")
    clock.now = 4.2
    progress.update("3/3 running")
    assert out.getvalue() == "1/3 running  (0s)\n2 starting\n\x1b[2F\x1b[J3/3 running  (4s)\n"


def test_notes_stay_above_the_redrawn_block_and_blocks_stack_by_key() -> None:
    out = io.StringIO()
    progress = Progress(out, in_place=True, show_elapsed=False)
    progress.update("job a: Running", key="a")
    progress.update("job b: Pending", key="b")
    progress.note("a-worker-0 restarted")
    progress.close()
    progress.update("done")
    assert out.getvalue() == (
        "job a: Running\n"
        "\x1b[1F\x1b[Jjob a: Running\n\njob b: Pending\n"
        "\x1b[3F\x1b[Ja-worker-0 restarted\njob a: Running\n\njob b: Pending\n"
        "done\n"
    )


def test_a_plain_stream_is_detected() -> None:
    assert Progress(io.StringIO()).in_place is False


def test_wait_until_returns_when_done_or_at_the_deadline() -> None:
    clock = FakeClock()
    answers = iter([(False, "0/2"), (False, "1/2"), (True, "2/2")])
    progress = Progress(io.StringIO(), in_place=False, clock=clock)
    assert wait_until(lambda: next(answers), progress, timeout=10, sleep=clock.sleep) == (True, "2/2")
    assert clock.now == 1.0

    clock = FakeClock()
    progress = Progress(io.StringIO(), in_place=False, clock=clock)
    assert wait_until(lambda: (False, "0/2"), progress, timeout=3, sleep=clock.sleep) == (False, "0/2")
    assert clock.now == 3.0


def view(phase: str = "Running", desired: int = 3, **pods: Any) -> dict[str, Any]:
    """A job view with trainer pods given as name=(phase, has pid)."""
    listed = [
        {"name": name, "role": "trainer", "phase": p, **({"pid": 1} if pid else {})}
        for name, (p, pid) in pods.items()
    ]
    listed.append({"name": "launcher-0", "role": "launcher", "phase": "Pending"})
    return {
        "metadata": {"name": "cce"},
        "status": {"phase": phase, "desired": {"trainer": desired}, "pods": listed},
    }


@pytest.mark.parametrize(
    ("job", "replicas", "done", "words"),
    [
        (view(t0=("Running", 1), t1=("Running", 1), t2=("Waiting", 0)), 3, False, "2/3 running, 1 starting"),
        (view(t0=("Running", 1), t1=("Running", 1), t2=("Running", 1)), 3, True, "3/3 running"),
        (view("Scaling", t0=("Running", 1), t1=("Running", 1), t2=("Running", 1)), 3, False, "3/3 running"),
        (
            view(desired=2, t0=("Running", 1), t1=("Running", 1), t2=("Removed", 1)),
            2,
            False,
            "2/2 running, 1 stopping",
        ),
        (view(desired=2, t0=("Running", 1), t1=("Running", 1), t2=("Removed", 0)), 2, True, "2/2 running"),
        (view(desired=3, t0=("Running", 1)), 1, False, "1/1 running"),
    ],
)
def test_scale_has_settled_when_exactly_that_many_run_and_nothing_comes_or_goes(
    job: dict[str, Any], replicas: int, done: bool, words: str
) -> None:
    assert settled(job, "trainer", replicas) == (done, f"job cce: role trainer {words}")


def test_scale_wait_stops_when_the_job_ends() -> None:
    with pytest.raises(CliError, match="job cce ended \\(Failed\\) before role trainer settled"):
        settled(view("Failed"), "trainer", 3)
