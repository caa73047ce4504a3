"""Where the local runtime keeps its files: ``$TRAINGUARD_HOME`` (default ``~/.trainguard``).

Everything lives in one directory that only its owner may enter (mode 0700): the SQLite state, the control
plane's lock, socket and log, per-pod logs and agent reports, and per-job files such as Horovod's
host-discovery script.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

ENV_HOME = "TRAINGUARD_HOME"
#: Where the jobs' memory snapshots (``trainguard.Snapshots``) are kept: shared memory.
SHARED_MEMORY = Path("/dev/shm")


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def from_env(cls) -> Home:
        configured = os.environ.get(ENV_HOME)
        root = Path(configured).expanduser() if configured else Path.home() / ".trainguard"
        return cls(root.absolute())

    def ensure(self) -> Home:
        """Create the directory tree, owner-only. An existing home is tightened to 0700 too."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        for sub in (self.logs_dir, self.jobs_dir):
            sub.mkdir(mode=0o700, exist_ok=True)
        return self

    @property
    def state_db(self) -> Path:
        return self.root / "state.db"

    @property
    def lock_file(self) -> Path:
        return self.root / "control.lock"

    @property
    def socket(self) -> Path:
        return self.root / "control.sock"

    @property
    def control_log(self) -> Path:
        return self.root / "control.log"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    def job_dir(self, job: str) -> Path:
        return self.jobs_dir / job

    def pod_log(self, job: str, pod: str) -> Path:
        return self.logs_dir / job / f"{pod}.log"

    def report_file(self, job: str, pod: str, launch: int) -> Path:
        """The agent's report for one launch of a pod; a new launch never reads an older one's lines."""
        return self.job_dir(job) / "reports" / f"{pod}.{launch}.jsonl"

    def nudge_file(self, job: str, pod: str, launch: int) -> Path:
        """The nudge file of one launch of a pod (its agent's ``--nudge-file``, ``trainguard.agent.nudge``)."""
        return self.job_dir(job) / "nudges" / f"{pod}.{launch}"

    def control_file(self, job: str, pod: str) -> Path:
        """Requests to a pod's agent (e.g. an injected exit code for ``chaos kill --exit-code``)."""
        return self.job_dir(job) / "control" / f"{pod}.json"

    @property
    def snapshots_root(self) -> Path:
        """Shared memory of this home's jobs (tmpfs: it outlives processes, not the machine); one directory
        per job uid, one per node below it. Named after the home, so that two homes never share one."""
        base = SHARED_MEMORY if SHARED_MEMORY.is_dir() else self.root / "shm"
        return base / f"trainguard-{hashlib.sha256(str(self.root).encode()).hexdigest()[:12]}"

    def snapshots_dir(self, uid: str, node: str) -> Path:
        """A node's shared memory for one job: what its pods' ``TRAINGUARD_SNAPSHOT_DIR`` names."""
        return self.snapshots_root / uid / node

    def discovery_script(self, job: str) -> Path:
        return self.job_dir(job) / "discover_hosts.sh"

    @property
    def injected_faults(self) -> Path:
        """A test aid: per virtual node, the check items that read as faulty there (``trainguard chaos
        hardware-fault``); every pod's agent is told of it (``contract.ENV_FAULT_INJECT``)."""
        return self.root / "injected-faults"
