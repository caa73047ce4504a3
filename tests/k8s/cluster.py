"""A handle on the test cluster that tests/k8s/conftest.py starts: its kubeconfig and its own kubectl."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class KubeCluster:
    name: str
    kubeconfig: Path
    bin_dir: Path

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60) -> str:
        """Runs the cluster's own kubectl and returns its stdout; fails the test with kubectl's stderr."""
        done = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout
