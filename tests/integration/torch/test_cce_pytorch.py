"""Example 2: the job shape of CCE's AITrainingJob example as an elastic PyTorch job, through the faults its rules name."""

from __future__ import annotations

import sys

import pytest
from torch_harness import START_TIMEOUT, checkpoint_steps

from trainguard.api.load import load_jobs
from trainguard.demo.session import EXAMPLES, Session

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

EXAMPLE = EXAMPLES / "cce-pytorch"


def test_the_cce_shape_trains_through_a_force_delete_and_a_kill_by_its_rules(session: Session) -> None:
    [loaded] = load_jobs(EXAMPLE / "cce-pytorch-elastic.yaml")
    spec = loaded.job.to_dict()
    checkpoints = session.root / "checkpoints"
    container = spec["spec"]["replicaSpecs"]["trainer"]["template"]["spec"]["containers"][0]
    container["command"] = [sys.executable, str(EXAMPLE / "synthetic_benchmark.py")]
    container["args"] = [
        "--num-iters=240",
        "--checkpoint-every=20",
        "--report-every=20",
        f"--checkpoint-dir={checkpoints}",
    ]
    job = session.submit(spec)
    name = spec["metadata"]["name"]

    def checkpoint_past(step: int) -> bool:
        return any(found > step for found in checkpoint_steps(checkpoints))

    session.wait("the first checkpoint", lambda: checkpoint_past(0), START_TIMEOUT, poll=0.2)
    session.chaos("force-delete", f"{name}-trainer-2")
    first = max(checkpoint_steps(checkpoints))
    session.wait("training to go on", lambda: checkpoint_past(first), START_TIMEOUT, poll=0.2)
    session.chaos("kill", f"{name}-trainer-0")
    session.wait(
        "the job to end", lambda: session.phase(job) in ("Succeeded", "Failed"), START_TIMEOUT * 2, poll=0.5
    )

    view = session.view(job)
    assert view["status"]["phase"] == "Succeeded", view["status"].get("message")
    history = [e for e in view["status"]["history"] if e["kind"] == "fault"]
    # The peers of a lost or killed worker fail in their collective, and torchrun restarts their workers inside
    # their pods: recorded (rule torchrun), not counted, and no decision of the job's rules.
    inside = [e for e in history if e["action"] == "restart-workers"]
    assert all((e["rule"], e["counted"]) == ("torchrun", False) for e in inside), inside
    faults = [(e["pod"], e["fault"], e["rule"], e["action"]) for e in history if e not in inside]
    assert faults[:2] == [
        (f"{name}-trainer-2", "PodForceDeleted", "faultTolerantPolicy[0]", "restart"),
        (f"{name}-trainer-0", "Exited", "restartPolicy", "restart"),
    ]
    # A replacement still starting when the training ends finds the rendezvous closed (torch's finishing agent
    # closes it before its pod ends) and exits 1; an end seen before the job's success is that trainer's own
    # error by the rules: it is not restarted (docs/pytorch.md, "The end of a job").
    for pod, fault, rule, action in faults[2:]:
        assert (fault, rule, action) == ("Exited", "restartPolicy", "shrink"), faults
        assert "RendezvousClosedError" in session.home.pod_log(name, pod).read_text(), pod
    logs = "".join(path.read_text() for path in (session.home.logs_dir / name).glob("*.log"))
    assert "[synthetic] done: 240 iterations" in logs
    resumed = [line for line in logs.splitlines() if "resuming at iteration" in line]
    assert any(not line.endswith("iteration 0 of 240") for line in resumed)  # a restart resumed a checkpoint
