"""The warm torchrun forks its fork server from itself once it has imported torch (one import per pod start,
not two): the workers are the fork server's children, the agent still finds them (the server's command line
is torchrun's own; its name says what it is), and the server ends with torchrun. Real torchrun, real workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from trainguard.pod import workerevents

TORCHRUN = (sys.executable, "-m", "trainguard.pod.torchrun", "--nproc-per-node", "2", "--nnodes", "1")
WORKER = """
import json, os
from trainguard.agent import nudge, proc

def parent_of(pid):
    return proc.stat(pid).ppid

me = os.getpid()
server = parent_of(me)
agent = parent_of(server)
print(json.dumps({
    "me": me,
    "my_name": proc.name(me),
    "server": server,
    "server_name": proc.name(server),
    "server_cmdline": proc.cmdline(server),
    "agent": agent,
    "agent_cmdline": proc.cmdline(agent),
    "agents_workers": sorted(w.pid for w in nudge.workers(agent)),
}), flush=True)
"""

FALLBACK = """
import threading, multiprocessing.forkserver as forkserver
from trainguard.pod.torchrun import start_fork_server
stop = threading.Event()
threading.Thread(target=stop.wait).start()
try:
    print("forked:", start_fork_server([]))
    print("running:", forkserver._forkserver._forkserver_pid is not None)
finally:
    stop.set()
"""


def test_the_workers_are_children_of_a_fork_server_forked_from_torchrun(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    done = subprocess.run(
        [*TORCHRUN, "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", str(script)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(seen) == 2, done.stdout
    workers = sorted(worker["me"] for worker in seen)
    for worker in seen:
        assert worker["server_name"] == workerevents.FORK_SERVER_NAME
        assert worker["my_name"] != workerevents.FORK_SERVER_NAME  # a worker takes the usual name back
        # Forked, not a fresh interpreter: torchrun's command line.
        assert worker["server_cmdline"] == worker["agent_cmdline"]
        assert worker["server_cmdline"][1:3] == ["-m", "trainguard.pod.torchrun"]
        # The agent's nudge finds both workers, and nothing else, under torchrun.
        assert worker["agents_workers"] == workers
    # The server ended with torchrun (its end of the "alive" pipe closed when torchrun exited).
    server = seen[0]["server"]
    deadline = time.monotonic() + 10
    while Path(f"/proc/{server}").exists() and _not_zombie(server):
        assert time.monotonic() < deadline, "the fork server outlived torchrun"
        time.sleep(0.05)


def test_with_a_thread_running_the_fork_server_is_started_as_multiprocessing_does() -> None:
    done = subprocess.run([sys.executable, "-c", FALLBACK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["forked: False", "running: True"]


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
