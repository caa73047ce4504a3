"""``python -m trainguard.pod.rendezvous_store``: serves a TCPStore (``trainguard.pod.tcpstore``) that torch's
clients and torchrun's agents use, imports no torch, and ends cleanly on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

torch_distributed = pytest.importorskip("torch.distributed")

START_SECONDS = 60.0


def _serving_port(process: subprocess.Popen[str], log: Path) -> int:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        found = re.search(r"serving on port (\d+)", log.read_text())
        if found:
            return int(found.group(1))
        if process.poll() is not None:
            pytest.fail(f"the store exited with {process.returncode}: {log.read_text()}")
        time.sleep(0.1)
    pytest.fail(f"the store did not serve within {START_SECONDS:g} s: {log.read_text()}")


def _start(log: Path) -> subprocess.Popen[str]:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "trainguard.pod.rendezvous_store", "--port", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


@pytest.mark.integration
def test_the_store_serves_clients_and_stops_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "store.log"
    process = _start(log)
    try:
        port = _serving_port(process, log)
        first = torch_distributed.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))
        second = torch_distributed.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))
        first.set("torch.rendezvous.job", b"state")
        assert second.get("torch.rendezvous.job") == b"state"
        assert second.compare_set("torch.rendezvous.job", b"state", b"next") == b"next"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert "SIGTERM, stopping" in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def store_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    log = tmp_path_factory.mktemp("store") / "store.log"
    process = _start(log)
    try:
        yield _serving_port(process, log)
    finally:
        process.kill()
        process.wait(timeout=10)


def _client(port: int, timeout: float = 10) -> Any:
    return torch_distributed.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=timeout))


# (what torch's client does, what it gets back): each on keys of its own, against one store.
_QUERIES: list[tuple[str, Callable[[Any], Any], Any]] = [
    ("set-get", lambda s: (s.set("sg", b"v"), s.get("sg"))[1], b"v"),
    ("add", lambda s: (s.add("ad", 3), s.add("ad", 4), s.get("ad")), (3, 7, b"7")),
    ("compare_set-missing", lambda s: s.compare_set("cs1", b"", b"x"), b"x"),
    ("compare_set-mismatch", lambda s: (s.set("cs2", b"o"), s.compare_set("cs2", b"e", b"n"))[1], b"o"),
    (
        "compare_set-match",
        lambda s: (s.set("cs3", b"o"), s.compare_set("cs3", b"o", b"n"), s.get("cs3"))[1:],
        (b"n", b"n"),
    ),
    ("check", lambda s: (s.set("ch", b"1"), s.check(["ch"]), s.check(["ch", "missing"]))[1:], (True, False)),
    (
        "multi",
        lambda s: (s.multi_set(["m1", "m2"], [b"1", b"2"]), s.multi_get(["m1", "m2"]))[1],
        [b"1", b"2"],
    ),
    ("append", lambda s: (s.append("ap", b"ab"), s.append("ap", b"cd"), s.get("ap"))[2], b"abcd"),
    ("delete", lambda s: (s.set("de", b"1"), s.delete_key("de"), s.delete_key("de"))[1:], (True, False)),
    ("prefix", lambda s: (torch_distributed.PrefixStore("job", s).set("k", b"1"), s.get("job/k"))[1], b"1"),
    (
        "queue",
        lambda s: (s.queue_push("qu", b"1"), s.queue_len("qu"), s.queue_pop("qu", block=False))[1:],
        (1, b"1"),
    ),
    ("list_keys", lambda s: (s.set("lk", b"1"), "lk" in s.list_keys())[1], True),
]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("query", "expected"), [(q[1], q[2]) for q in _QUERIES], ids=[q[0] for q in _QUERIES]
)
def test_torchs_client_gets_what_torchs_server_answers(
    store_port: int, query: Callable[[Any], Any], expected: Any
) -> None:
    assert query(_client(store_port)) == expected


@pytest.mark.integration
def test_a_wait_ends_when_another_client_sets_the_key_and_a_timed_out_wait_leaves_the_client_usable(
    store_port: int,
) -> None:
    waiting, setting = _client(store_port), _client(store_port)
    with pytest.raises(torch_distributed.DistStoreError):
        waiting.wait(["never"], timedelta(seconds=0.3))  # the client cancels its wait
    assert waiting.add("usable", 1) == 1
    threading.Timer(0.3, setting.set, ("later", b"1")).start()
    waiting.wait(["later"], timedelta(seconds=30))
    assert waiting.get("later") == b"1"
    done: list[Any] = []
    other = threading.Thread(target=lambda: done.append(setting.barrier("bar", 2, timedelta(seconds=30))))
    other.start()
    waiting.barrier("bar", 2, timedelta(seconds=30))
    other.join(timeout=30)
    assert done == [None]


TRAIN = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {t.item():g}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.integration
def test_torchruns_agents_rendezvous_through_it_as_clients(store_port: int, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{store_port}", "--rdzv-id", "job-uid",
        "--rdzv-conf", "is_host=false,last_call_timeout=1", "--max-restarts", "0", str(script),
    ]  # fmt: skip
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    agents = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for _ in range(2)
    ]
    outputs = [
        agent.communicate(timeout=240)[0] for agent in agents
    ]  # two torch imports each, on a busy machine
    assert [agent.returncode for agent in agents] == [0, 0], outputs
    ranks = sorted(line for out in outputs for line in out.splitlines() if line.startswith("rank "))
    assert ranks == ["rank 0 of 2: 3", "rank 1 of 2: 3"], outputs


def test_the_store_module_imports_no_torch_and_nothing_of_trainguards_but_its_package() -> None:
    code = (
        "import sys, trainguard.pod.rendezvous_store as m; "
        "print(sorted(n for n in sys.modules if n.startswith(('trainguard', 'kubernetes', 'torch'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == str(
        [
            "trainguard",
            "trainguard._version",
            "trainguard.pod",
            "trainguard.pod.rendezvous_store",
            "trainguard.pod.tcpstore",
        ]
    )
