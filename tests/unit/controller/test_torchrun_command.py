"""How a PyTorch job's pods start torchrun: the rendering of commands and environment (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.api import TrainingJob
from trainguard.controller import torchrun_command as launch
from trainguard.pod import contract

ENDPOINT = "127.0.0.1:29999"
OURS = [
    "--nnodes",
    "1:5",
    "--nproc-per-node",
    "1",
    "--max-restarts",
    str(launch.DEFAULT_MAX_RESTARTS),
    "--rdzv-backend",
    "c10d",
    "--rdzv-endpoint",
    ENDPOINT,
    "--rdzv-id",
    "uid-1",
    "--rdzv-conf",
    "last_call_timeout=5,is_host=false",
]


def job(
    command: list[str] | None = None,
    *,
    framework: str = "pytorch",
    elastic: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    roles: dict[str, dict[str, Any]] | None = None,
) -> TrainingJob:
    def role(argv: list[str], **sizes: Any) -> dict[str, Any]:
        return {**sizes, "template": {"spec": {"containers": [{"name": "c", "command": argv}]}}}

    spec: dict[str, Any] = {
        "frameworkType": framework,
        "replicaSpecs": roles
        or {"worker": role(command or ["python", "train.py"], replicas=3, minReplicas=1, maxReplicas=5)},
    }
    if elastic is not None:
        spec["elastic"] = elastic
    metadata = {"name": "j", "uid": "uid-1", "annotations": annotations or {}}
    return TrainingJob.model_validate({"metadata": metadata, "spec": spec})


@pytest.mark.parametrize(
    ("command", "rendered"),
    [
        (["python", "train.py", "--lr", "0.1"], ["python", "-m", launch.WARM_LAUNCHER, *OURS, "train.py", "--lr", "0.1"]),
        (["python3", "-u", "train.py"], ["python3", "-m", launch.WARM_LAUNCHER, *OURS, "train.py"]),
        (["/opt/py/bin/python3.11", "-m", "pkg.train"], ["/opt/py/bin/python3.11", "-m", launch.WARM_LAUNCHER, *OURS, "-m", "pkg.train"]),
        (["torchrun", "train.py"], ["python", "-m", launch.WARM_LAUNCHER, *OURS, "train.py"]),
        (
            ["torchrun", "--standalone", "--nnodes=2", "--master_port", "1234", "--log-dir", "/l", "-r3", "train.py", "-x"],
            ["python", "-m", launch.WARM_LAUNCHER, *OURS, "--log-dir", "/l", "-r3", "train.py", "-x"],
        ),
        (
            ["python", "-m", "torch.distributed.run", "--start-method", "spawn", "train.py"],
            ["python", "-m", launch.PLAIN_LAUNCHER, *OURS, "--start-method", "spawn", "train.py"],
        ),
        (
            ["python", "-O", "-m", "pkg.train"],
            ["python", "-m", launch.PLAIN_LAUNCHER, *OURS, "--no-python", "python", "-O", "-m", "pkg.train"],
        ),
    ],
)  # fmt: skip
def test_python_and_torchrun_commands_run_under_torchruns_agent(
    command: list[str], rendered: list[str]
) -> None:
    assert launch.render(job(command), "worker", ENDPOINT) == rendered


@pytest.mark.parametrize(
    "command",
    [["/bin/sh", "-c", "torchrun train.py"], ["python", "-c", "print(1)"], ["./train"], ["python"]],
)
def test_other_commands_are_kept_as_written(command: list[str]) -> None:
    assert launch.render(job(command), "worker", ENDPOINT) == command


def test_jobs_that_are_not_pytorch_or_opt_out_are_kept_as_written() -> None:
    assert launch.render(job(framework="horovod"), "worker", ENDPOINT) == ["python", "train.py"]
    opted_out = job(annotations={launch.TORCHRUN_ANNOTATION: "false"})
    assert launch.render(opted_out, "worker", ENDPOINT) == ["python", "train.py"]
    assert launch.torchrun_env(opted_out, ENDPOINT) == {}


def test_an_elastic_block_makes_any_framework_torchrun_and_its_values_win() -> None:
    elastic = {
        "nProcPerNode": 4,
        "maxRestarts": 7,
        "rdzvConf": {"join_timeout": "900", "last_call_timeout": "2"},
    }
    argv = launch.render(
        job(
            ["torchrun", "--nproc-per-node=2", "--max-restarts=1", "t.py"],
            framework="generic",
            elastic=elastic,
        ),
        "worker",
        ENDPOINT,
    )
    flags = dict(zip(argv[3:-1:2], argv[4:-1:2], strict=True))
    assert flags["--nproc-per-node"] == "4"
    assert flags["--max-restarts"] == "7"
    assert flags["--rdzv-conf"] == "last_call_timeout=2,join_timeout=900,is_host=false"


def test_the_commands_own_values_are_used_when_the_job_leaves_them_at_their_defaults() -> None:
    argv = launch.render(
        job(["torchrun", "--nproc_per_node", "2", "--max_restarts=3", "--rdzv-conf=join_timeout=60", "t.py"]),
        "worker",
        ENDPOINT,
    )
    flags = dict(zip(argv[3:-1:2], argv[4:-1:2], strict=True))
    assert (flags["--nproc-per-node"], flags["--max-restarts"]) == ("2", "3")
    assert flags["--rdzv-conf"] == "last_call_timeout=5,join_timeout=60,is_host=false"


def test_the_jobs_own_rendezvous_host_is_used_and_not_hosted_by_trainguard() -> None:
    own = job(elastic={"rdzvHost": "etcd.svc", "rdzvPort": 2379, "rdzvBackend": "etcd-v2", "rdzvId": "mine"})
    rdzv = launch.rendezvous(own, ENDPOINT)
    assert rdzv == launch.Rendezvous("etcd-v2", "etcd.svc:2379", "mine", hosted=False)
    assert "is_host=false" not in launch.torchrun_env(own, ENDPOINT)["PET_RDZV_CONF"]


def test_nnodes_sums_the_torchrun_roles_of_the_job() -> None:
    def role(argv: list[str], **sizes: Any) -> dict[str, Any]:
        return {**sizes, "template": {"spec": {"containers": [{"name": "c", "command": argv}]}}}

    two_roles = job(
        roles={
            "master": role(["python", "train.py"], replicas=1),
            "worker": role(["python", "train.py"], replicas=2, minReplicas=1, maxReplicas=4),
            "tensorboard": role(["tensorboard", "--logdir", "/l"], replicas=1),
        }
    )
    assert launch.torchrun_roles(two_roles) == ("master", "worker")
    assert launch.nnodes(two_roles) == (2, 5)
    assert launch.render(two_roles, "master", ENDPOINT)[3:5] == ["--nnodes", "2:5"]


def test_every_pod_gets_the_shared_store_fix_and_torchruns_defaults() -> None:
    env = launch.torchrun_env(job(), ENDPOINT)
    assert env == {
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": ENDPOINT,
        "PET_RDZV_ID": "uid-1",
        "PET_RDZV_CONF": "last_call_timeout=5,is_host=false",
        "PET_NNODES": "1:5",
        "PET_NPROC_PER_NODE": "1",
        "PET_MAX_RESTARTS": str(launch.DEFAULT_MAX_RESTARTS),
        contract.ENV_RDZV_POLL_SECONDS: "0.1",
    }


@pytest.mark.parametrize(
    ("command", "defaults"),
    [
        (["python", "train.py"], False),  # written: every flag on the command line
        (["torchrun", "--nproc-per-node", "2", "train.py"], False),
        (["python", "-m", "torch.distributed.run", "train.py"], False),
        (["/bin/sh", "-c", "torchrun train.py"], True),  # runs as written: its torchrun reads PET_*
        (["bash", "run.sh", "torchrun"], True),
    ],
)
def test_torchruns_defaults_go_only_to_the_pods_whose_command_is_not_written(
    command: list[str], defaults: bool
) -> None:
    one = job(command)
    assert launch.writes_command(one, "worker") is not defaults
    env = launch.torchrun_env(one, ENDPOINT, "worker")
    assert {name for name in env if name.startswith("PET_")} == (
        {name for name in launch.torchrun_env(one, ENDPOINT) if name.startswith("PET_")}
        if defaults
        else set()
    )
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"  # the store fix goes to every pod
    if not defaults:  # what the defaults would say, the command says
        rendered = launch.render(one, "worker", ENDPOINT)
        assert rendered[rendered.index("--rdzv-endpoint") + 1] == ENDPOINT
    assert not launch.writes_command(job(framework="horovod"), "worker")


@pytest.mark.parametrize(
    ("command", "env", "elastic", "flags"),
    [
        (["python", "train.py"], {"PET_NPROC_PER_NODE": "4", "PET_MAX_RESTARTS": "7"}, None, ("4", "7")),
        (["torchrun", "--nproc-per-node", "2", "train.py"], {"PET_NPROC_PER_NODE": "4"}, None, ("2", None)),
        (["python", "train.py"], {"PET_NPROC_PER_NODE": "4"}, {"nProcPerNode": 8}, ("8", None)),
        (["python", "train.py"], {}, None, ("1", None)),
    ],
)
def test_torchruns_defaults_in_the_containers_env_are_kept_as_torchrun_reads_them(
    command: list[str], env: dict[str, str], elastic: dict[str, Any] | None, flags: tuple[str, str | None]
) -> None:
    """The job's elasticPolicy first, then the command's flag, then the container's PET_* (torchrun's order)."""
    one = job(command, elastic=elastic)
    container = one.spec.replica_specs["worker"].container
    container["env"] = [{"name": name, "value": value} for name, value in env.items()]
    rendered = launch.render(one, "worker", ENDPOINT)
    nproc, restarts = flags
    assert rendered[rendered.index("--nproc-per-node") + 1] == nproc
    expected = restarts or str(launch.DEFAULT_MAX_RESTARTS)
    assert rendered[rendered.index("--max-restarts") + 1] == expected


def test_a_live_job_runs_its_workers_under_the_live_launcher_with_its_first_size() -> None:
    live = job(
        ["torchrun", "--start-method", "spawn", "train.py"],
        annotations={launch.LIVE_ANNOTATION: "true"},
        elastic={"nProcPerNode": 2},
    )
    assert launch.is_live(live)
    rendered = launch.render(live, "worker", ENDPOINT)
    assert rendered[:4] == ["python", "-m", launch.WARM_LAUNCHER, "--live"]  # whatever the start method
    assert rendered[-1] == "train.py"
    env = launch.torchrun_env(live, ENDPOINT)
    assert (env["TRAINGUARD_LIVE_SIZE"], env["TRAINGUARD_LIVE_MINIMUM"]) == (
        "6",
        "2",
    )  # 3 pods x 2, 1 pod x 2
    assert not launch.is_live(job(annotations={launch.LIVE_ANNOTATION: "false"}))
    assert "TRAINGUARD_LIVE_SIZE" not in launch.torchrun_env(job(), ENDPOINT)
    not_torch = job(framework="generic", annotations={launch.LIVE_ANNOTATION: "true"})
    assert not launch.is_live(not_torch)


def test_warm_start_can_be_turned_off() -> None:
    cold = job(annotations={launch.WARM_START_ANNOTATION: "false"})
    assert launch.render(cold, "worker", ENDPOINT)[:3] == ["python", "-m", launch.PLAIN_LAUNCHER]


def test_a_torchrun_command_without_a_script_names_the_field() -> None:
    with pytest.raises(
        launch.LaunchError, match=r"spec\.replicaSpecs\.worker\.template\.spec\.containers\[0\]\.command: "
    ):
        launch.render(job(["torchrun", "--nnodes", "2"]), "worker", ENDPOINT)


@pytest.mark.parametrize(("nodes", "seconds"), [(1, 0.1), (5, 0.1), (10, 0.2), (50, 1.0), (1000, 1.0)])
def test_rendezvous_polling_slows_down_with_the_jobs_size(nodes: int, seconds: float) -> None:
    assert launch.poll_seconds(nodes) == seconds


_TOKEN = st.text(
    st.characters(categories=["L", "N"]) | st.sampled_from("-_=./:,"), min_size=1, max_size=8
).filter(lambda token: not token.startswith("-"))


@given(
    user_flags=st.lists(
        st.sampled_from(["--log-dir", "--role", "--nnodes", "--rdzv-id", "--tee"]), max_size=4
    ),
    values=st.lists(_TOKEN, min_size=4, max_size=4),
    script_args=st.lists(_TOKEN, max_size=4),
)
def test_the_script_and_its_arguments_always_come_through_unchanged(
    user_flags: list[str], values: list[str], script_args: list[str]
) -> None:
    command = ["torchrun"]
    for flag, value in zip(user_flags, values, strict=False):
        command += [flag, value]
    command += ["train.py", *script_args]
    rendered = launch.render(job(command), "worker", ENDPOINT)
    assert rendered[-len(script_args) - 1 :] == ["train.py", *script_args]
    assert rendered.count("--nnodes") == 1
    assert rendered.count("--rdzv-id") == 1
