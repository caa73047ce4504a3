"""Example 1 with memory snapshots (``--snapshots``, copied or ``--in-place``) on the local runtime: every fault of one pod, and a
resize, lose at most the step in progress, and each rank resumes from where its state was (its node's memory,
a peer), as its log says."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from torch_harness import RECOVERY_TIMEOUT, wait_step, wait_world, workers_of

from trainguard.demo.session import Recovery, Session, digits_job, recovery

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

#: Disk checkpoints are rare here: what recovers is memory.
PERSIST_EVERY = 50
_START = re.compile(r"\[digits\] rank (\d+)/(\d+): starting at step (\d+) from (\w+)")


def _sources(session: Session, job: str, pod: str, since: int) -> list[tuple[int, str]]:
    """(step, source) of each start in ``pod``'s log after its first ``since`` starts."""
    text = session.home.pod_log(job, pod).read_text(errors="replace")
    return [(int(m[3]), m[4]) for m in _START.finditer(text)][since:]


def _starts(session: Session, job: str, pod: str) -> int:
    return len(_sources(session, job, pod, 0))


def _replaced(session: Session, job: str, pod: str, fault: Callable[[], object]) -> Recovery:
    """Inject ``fault`` (which takes ``pod`` down as a whole), then check the recovery once ``pod``'s
    replacement is back: at most one step lost, and the replacement resumed from memory or a peer at that step."""
    before = _starts(session, job, pod)
    fault()
    at = time.time()
    back = session.wait(f"{pod}'s replacement training", lambda: recovery(session.run(job).events(), at, world=3),
                        RECOVERY_TIMEOUT)  # fmt: skip
    assert back.steps_lost <= 1, back
    starts = session.wait(f"{pod}'s new start", lambda: _sources(session, job, pod, before), 60)
    assert starts[-1][0] == back.resumed_from, (starts, back)
    assert starts[-1][1] in ("memory", "buddy", "peer"), starts
    return back


@pytest.mark.parametrize("in_place", [False, True], ids=["copied", "in-place"])
def test_faults_and_a_resize_lose_at_most_one_step(session: Session, in_place: bool) -> None:
    """Copied: each snapshot a copy of the state. In place (``--in-place``): the parameters and the optimizer's
    state are kept in shared memory, a rank killed inside its optimizer step gets the step from a peer."""
    spec = digits_job(
        "digits-mem", session.root, epochs=60, step_delay=0.05, checkpoint_every=PERSIST_EVERY,
        extra_args=("--snapshots", *(("--in-place",) if in_place else ())),
    )  # fmt: skip
    job = session.submit(spec)
    wait_step(session, job, 10)
    # The first start of every rank: nothing to resume from.
    assert {
        pod: _sources(session, job, pod, 0) for pod in ("digits-mem-worker-0", "digits-mem-worker-1")
    } == {
        "digits-mem-worker-0": [(0, "none")],
        "digits-mem-worker-1": [(0, "none")],
    }

    # 1. The training process of one pod killed: torchrun restarts every worker; each reads its node's memory.
    before = _starts(session, job, "digits-mem-worker-2")
    (worker,) = workers_of(session, job, "digits-mem-worker-2")
    worker.kill()
    killed_at = time.time()
    lost = session.wait("the restart after the kill", lambda: recovery(session.run(job).events(), killed_at),
                        RECOVERY_TIMEOUT)  # fmt: skip
    assert lost.steps_lost <= 1, lost
    again = session.wait(
        "worker 2's new start", lambda: _sources(session, job, "digits-mem-worker-2", before), 60
    )
    # Its node's memory; or, where the kill came while its newest snapshot was being copied and the others had
    # theirs of that step (one replicated state), a peer sends it: either way no disk.
    assert again in ([(lost.resumed_from, "memory")], [(lost.resumed_from, "peer")])

    # 2. A whole pod killed (its torchrun too): relaunched, and it finds its state in its node's memory or
    # receives it from a peer; the others read their own.
    wait_world(session, job, 3, after=lost.next_step_at)
    before = _starts(session, job, "digits-mem-worker-1")
    session.chaos("kill", "digits-mem-worker-1")
    killed_at = time.time()
    lost = session.wait("the restart after the pod's kill",
                        lambda: recovery(session.run(job).events(), killed_at, world=3), RECOVERY_TIMEOUT)  # fmt: skip
    assert lost.steps_lost <= 1, lost
    (start,) = session.wait(
        "worker 1's new start", lambda: _sources(session, job, "digits-mem-worker-1", before), 60
    )
    assert start[0] == lost.resumed_from
    assert start[1] in ("memory", "buddy", "peer")

    # 3. A pod force-deleted: its replacement resumes at the same step as the others, from memory or a peer.
    wait_step(session, job, lost.resumed_from + 10)
    lost = _replaced(
        session, job, "digits-mem-worker-2", lambda: session.chaos("force-delete", "digits-mem-worker-2")
    )

    # 4. Scale-in 3 -> 2: the stopped worker and the survivors finish their step and snapshot it; nothing lost.
    wait_step(session, job, lost.resumed_from + 10)
    asked = time.time()
    session.scale(job, "worker", 2)
    two = session.wait(
        "2 workers", lambda: recovery(session.run(job).events(), asked, world=2), RECOVERY_TIMEOUT
    )
    assert two.steps_lost == 0, two

    # 5. Scale-out 2 -> 3: the two finish their step and snapshot it before the new round; nothing lost.
    wait_step(session, job, two.resumed_from + 10)
    asked = time.time()
    session.scale(job, "worker", 3)
    three = session.wait(
        "3 workers", lambda: recovery(session.run(job).events(), asked, world=3), RECOVERY_TIMEOUT
    )
    assert three.steps_lost == 0, three

    # 6. A node lost with its pod: its memory went with it; the replacement, on another node, resumes from
    # that node's memory or a peer.
    wait_step(session, job, three.resumed_from + 10)
    node = session.pods(job)["digits-mem-worker-1"]["node"]
    _replaced(session, job, "digits-mem-worker-1", lambda: session.chaos("node-down", node))

    # Long enough never to end before the faults: deleted rather than waited for. Its memory goes with it.
    memory = session.home.snapshots_root
    assert memory.exists()
    session.call("delete", job=job)
    session.wait("the job's memory freed", lambda: not memory.exists(), 60)
