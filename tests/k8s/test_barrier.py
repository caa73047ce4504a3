"""CCE's job barrier (``trainguard barrier``): what it waits for (pure), its flags, and the access the operator
gives the pods that run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trainguard.backends.k8s import access, barrier, manifests, metadata
from trainguard.backends.k8s.kinds import AITRAININGJOB
from trainguard.pod import contract

from .launches import cce_job as _cce
from .launches import launch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
JOB, NS = "j", "ns"


def _pod(
    role: str, index: int, phase: str = "Running", deleting: bool = False, ready: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"{JOB}-{role}-{index}",
        "labels": {metadata.LABEL_JOB: JOB, metadata.LABEL_ROLE: role, metadata.LABEL_INDEX: str(index)},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-24T00:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if ready is not None:
        status["conditions"] = [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": ready}]
    return {"metadata": meta, "status": status}


def _all_resolve(name: str) -> bool:
    return True


@pytest.mark.parametrize(
    ("pods", "sizes", "unresolved", "expected"),
    [
        ([_pod("trainer", 0), _pod("trainer", 1)], {"trainer": 2}, set(), []),
        ([_pod("trainer", 0)], {"trainer": 2}, set(), ["j-trainer-1: not created yet"]),
        (
            [_pod("trainer", 0), _pod("trainer", 1, "Pending")],
            {"trainer": 2},
            set(),
            ["j-trainer-1: Pending"],
        ),
        (
            [_pod("trainer", 0)],
            {"trainer": 1},
            {"j-trainer-0.j.ns.svc"},
            ["j-trainer-0: j-trainer-0.j.ns.svc does not resolve yet"],
        ),
        # Running is not enough where the pod is not Ready: a Horovod host whose sshd does not answer yet.
        (
            [_pod("trainer", 0, ready="True"), _pod("trainer", 1, ready="False")],
            {"trainer": 2},
            set(),
            ["j-trainer-1: Running, not Ready yet"],
        ),
        # A pod on its way out is no pod to wait on.
        ([_pod("trainer", 0, deleting=True)], {"trainer": 1}, set(), ["j-trainer-0: not created yet"]),
        # Other roles do not count.
        ([_pod("launcher", 0, "Pending"), _pod("trainer", 0)], {"trainer": 1, "launcher": 1}, set(), []),
        # Without the sizes: every pod of the role that exists, and at least one.
        ([], None, set(), ["j-trainer-0: not created yet"]),
        ([_pod("trainer", 0), _pod("trainer", 2, "Pending")], None, set(), ["j-trainer-2: Pending"]),
    ],
)
def test_what_the_barrier_waits_for(
    pods: list[dict[str, Any]], sizes: dict[str, int] | None, unresolved: set[str], expected: list[str]
) -> None:
    def resolve(name: str) -> bool:
        return name not in unresolved

    assert barrier.waiting_for(pods, JOB, NS, ("trainer",), sizes, resolve) == expected


def test_it_says_what_it_waits_for_when_that_changes_and_returns_once_all_are_up() -> None:
    views = [[], [_pod("trainer", 0, "Pending")], [_pod("trainer", 0, "Pending")], [_pod("trainer", 0)]]
    said: list[str] = []
    clock = iter(range(100))
    missing = barrier.wait(
        lambda: views.pop(0), JOB, NS, ("trainer",), {"trainer": 1}, 60, said.append,
        clock=lambda: float(next(clock)), sleep=lambda s: None, resolve=_all_resolve,
    )  # fmt: skip
    assert missing == []
    assert said == [
        "waiting for j-trainer-0: not created yet",
        "waiting for j-trainer-0: Pending",
        "every pod is up",
    ]


def test_past_its_deadline_it_returns_what_is_missing() -> None:
    clock = iter(range(100))
    missing = barrier.wait(
        list, JOB, NS, ("trainer",), {"trainer": 1}, 5, lambda line: None,
        clock=lambda: float(next(clock)), sleep=lambda s: None, resolve=_all_resolve,
    )  # fmt: skip
    assert missing == ["j-trainer-0: not created yet"]


@pytest.mark.parametrize(
    ("text", "sizes"),
    [("launcher=1,trainer=3", {"launcher": 1, "trainer": 3}), ("", {}), ("trainer=0,", {"trainer": 0})],
)
def test_role_sizes(text: str, sizes: dict[str, int]) -> None:
    assert barrier.parse_sizes(text) == sizes


@pytest.mark.parametrize("text", ["trainer", "trainer=x", "=3", "trainer=-1"])
def test_bad_role_sizes_name_the_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not ROLE=COUNT, e\.g\. trainer=3"):
        barrier.parse_sizes(text)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "the following arguments are required: --barrier_roles"),
        (["--barrier_roles=", "--name=j", "--namespace=ns"], "--barrier_roles: name at least one role"),
        (["--barrier_roles=trainer", "--name=$(TRAININGJOB_NAME)", "--namespace=ns"], "--name: no job given"),
        (
            ["--barrier_roles=trainer", "--name=j", "--namespace=ns", "--timeout=0"],
            "positive number of seconds",
        ),
        (["--barrier_roles=trainer", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_status_2(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trainguard.cli.main", "barrier", *args],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_the_launcher_runs_its_barrier_with_the_jobs_variables_and_read_access_to_pods() -> None:
    job = _cce()
    assert access.barrier_roles(job) == {"launcher"}
    sizes = {"launcher": 1, "trainer": 3}
    launcher = manifests.pod(AITRAININGJOB, job, launch(job, "launcher", 0, sizes), manifests.PodSettings())
    (barrier_container,) = [c for c in launcher["spec"]["initContainers"] if c["name"] == "job-barrier"]
    env = {item["name"]: item["value"] for item in barrier_container["env"]}
    assert env["TRAININGJOB_NAME"] == job.name
    assert env["TRAININGJOB_NAMESPACE"] == "default"
    assert env[contract.ENV_ROLE_SIZES] == "launcher=1,trainer=3"
    assert launcher["spec"]["serviceAccountName"] == f"{job.name}-barrier"
    # The trainers run no barrier: their service account is left alone.
    trainer = manifests.pod(AITRAININGJOB, job, launch(job, "trainer", 0, sizes), manifests.PodSettings())
    assert "serviceAccountName" not in trainer["spec"]
    account, role, binding = access.access_objects(AITRAININGJOB, job)
    assert (account["kind"], role["kind"], binding["kind"]) == ("ServiceAccount", "Role", "RoleBinding")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{job.name}-barrier", "namespace": "default"}
    ]
    assert all(obj["metadata"]["ownerReferences"][0]["uid"] == "uid-1" for obj in (account, role, binding))
    assert json.dumps(role).count("secrets") == 0


@pytest.mark.parametrize(
    ("image", "replaced"),
    [
        ("registry.baidubce.com/cce-plugin-dev/jobbarrier:v0.9-1", True),  # CCE's templates
        ("registry.baidubce.com/cce-plugin-dev/jobbarrier", True),
        ("registry.baidubce.com/cce-plugin-dev/jobbarrier@sha256:" + "a" * 64, True),
        ("registry.baidubce.com/cce-plugin-dev/jobbarrier-fork:v1", False),
        ("example.com/my/barrier:v1", False),  # a barrier of the user's own
    ],
)
def test_the_operators_barrier_image_runs_cces_barrier_in_its_place(image: str, replaced: bool) -> None:
    job = _cce()
    job.spec.replica_specs["launcher"].template["spec"]["initContainers"][0]["image"] = image
    sizes = {"launcher": 1, "trainer": 3}
    ours = "ghcr.io/trainguard/operator:0.1.0"
    settings = manifests.PodSettings(barrier_image=ours)
    launcher = manifests.pod(AITRAININGJOB, job, launch(job, "launcher", 0, sizes), settings)
    (container,) = [c for c in launcher["spec"]["initContainers"] if c["name"] == "job-barrier"]
    if replaced:
        assert (container["image"], container["command"]) == (ours, ["trainguard", "barrier"])
    else:
        assert (container["image"], container.get("command")) == (image, None)
    assert container["args"][0] == "--barrier_roles=trainer"  # CCE's flags, as written
    # Without the setting, CCE's image as the template names it.
    plain = manifests.pod(AITRAININGJOB, job, launch(job, "launcher", 0, sizes), manifests.PodSettings())
    (kept,) = [c for c in plain["spec"]["initContainers"] if c["name"] == "job-barrier"]
    assert (kept["image"], kept.get("command")) == (image, None)
