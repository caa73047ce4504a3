"""A handle on the test cluster that tests/k8s/conftest.py starts: its kubeconfig and its own kubectl."""

from __future__ import annotations

import subprocess
import time
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
        done = self._kubectl(args, input, timeout)
        if done.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def wait_established(self, crd: str, timeout: float = 60) -> None:
        """Until the CRD named ``crd`` serves its resource (``kubectl wait`` fails, rather than waits, on a CRD
        so new that it has no conditions yet)."""
        jsonpath = '{.status.conditions[?(@.type=="Established")].status}'
        deadline = time.monotonic() + timeout
        while self.kubectl_result("get", "crd", crd, "-o", f"jsonpath={jsonpath}") != "True":
            if time.monotonic() > deadline:
                pytest.fail(f"CRD {crd} not established within {timeout:g} s")
            time.sleep(0.2)

    def kubectl_result(self, *args: str, timeout: float = 60) -> str:
        """kubectl's stdout, or "" where it failed or did not answer within ``timeout`` (a container not started
        yet, a pod just deleted, the logs of a pod whose node died: its kubelet never answers)."""
        try:
            done = self._kubectl(args, None, timeout)
        except subprocess.TimeoutExpired:
            return ""
        return done.stdout if done.returncode == 0 else ""

    def _kubectl(
        self, args: tuple[str, ...], input: str | None, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
