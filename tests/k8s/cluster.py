"""A handle on the test cluster that tests/k8s/conftest.py starts: its kubeconfig and its own kubectl.

The tests' reads (``get_json``) go through one API client instead of a kubectl process each: the tests poll
a job's status or its pods every fraction of a second, and each kubectl run costs about 0.1 s of CPU (over a
whole run of the suite, 2,300 runs and 5 % of its CPU). So do the pods' logs (``logs``), which the real-node
tests poll every 2 s for a job's next step. Everything else (apply, patch, delete, exec) is kubectl, as a user
would type it.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trainguard.backends.k8s import kinds
from trainguard.backends.k8s.client import ApiError, Kube

#: What ``get_json`` reads without kubectl: a kind as kubectl names it (singular or plural) -> its API group
#: and version, plural, and whether it lives in a namespace. Any other kind is read by kubectl.
_CORE = {"pods": True, "nodes": False, "events": True, "services": True, "configmaps": True}
_GROUPS = {
    "leases": ("coordination.k8s.io/v1", True),
    "podgroups": ("scheduling.volcano.sh/v1beta1", True),
    **{
        kind.plural: (kind.api_version, True)
        for kind in (kinds.NATIVE, kinds.AITRAININGJOB, kinds.PYTORCHJOB)
    },
}
_KINDS: dict[str, tuple[str, str, bool]] = {
    **{plural: ("/api/v1", plural, namespaced) for plural, namespaced in _CORE.items()},
    **{plural: (f"/apis/{version}", plural, namespaced) for plural, (version, namespaced) in _GROUPS.items()},
}
_KINDS.update({plural[:-1]: found for plural, found in list(_KINDS.items())})
#: One client per kubeconfig file as it is (a cluster started again writes new credentials).
_clients: dict[tuple[str, int], Kube] = {}
_clients_lock = threading.Lock()


def read_path(args: tuple[str, ...]) -> tuple[str, dict[str, str]] | None:
    """The API path and query of ``kubectl get KIND [NAME] [-n NS] [-l SELECTOR] [--field-selector S]`` (also
    ``KIND/NAME``); None for any other command, which kubectl runs."""
    if not args or args[0] != "get":
        return None
    namespace, query, words = "default", {}, []
    rest = list(args[1:])
    while rest:
        word = rest.pop(0)
        if word in ("-n", "--namespace", "-l", "--selector", "--field-selector") and rest:
            value = rest.pop(0)
            if word in ("-n", "--namespace"):
                namespace = value
            else:
                query["labelSelector" if word in ("-l", "--selector") else "fieldSelector"] = value
        elif word.startswith("-"):
            return None
        else:
            words.append(word)
    if len(words) == 1 and "/" in words[0]:
        words = words[0].split("/", 1)
    if not 1 <= len(words) <= 2 or words[0] not in _KINDS or (len(words) == 2 and query):
        return None
    prefix, plural, namespaced = _KINDS[words[0]]
    path = f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"
    return (f"{path}/{words[1]}" if len(words) == 2 else path), query


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

    def get_json(self, *args: str) -> Any:
        """What ``kubectl ARGS -o json`` prints, read through the API where ``read_path`` knows the command
        (as kubectl gives them: a list's items carry their kind and apiVersion, no object its managedFields);
        fails the test where the read fails."""
        found = read_path(args)
        if found is None:
            return json.loads(self.kubectl(*args, "-o", "json"))
        path, query = found
        try:
            answer = self.api().request("GET", path, query=query, timeout=60)
        except ApiError as error:
            pytest.fail(f"kubectl {' '.join(args)} (GET {path}) failed: {error}")
        list_kind = str(answer.get("kind", ""))
        if "items" in answer and list_kind.endswith("List"):
            for item in answer["items"]:
                item.setdefault("kind", list_kind.removesuffix("List"))
                item.setdefault("apiVersion", answer.get("apiVersion"))
                item.get("metadata", {}).pop("managedFields", None)
        else:
            answer.get("metadata", {}).pop("managedFields", None)
        return answer

    def logs(
        self,
        pod: str,
        namespace: str = "default",
        container: str | None = None,
        *,
        timestamps: bool = False,
        previous: bool = False,
        timeout: float = 30,
    ) -> str:
        """What ``kubectl logs POD [-n NS] [-c C] [--timestamps] [--previous]`` prints, read through the API; ""
        where it cannot be read (a container not started yet, a pod just deleted, the logs of a pod whose node
        died: its kubelet never answers, and ``timeout`` ends the wait)."""
        query = {"container": container} if container else {}
        if timestamps:
            query["timestamps"] = "true"
        if previous:
            query["previous"] = "true"
        try:
            return self.api().text(
                f"/api/v1/namespaces/{namespace}/pods/{pod}/log", read_timeout=timeout, **query
            )
        except ApiError:
            return ""

    def api(self) -> Kube:
        """The API client of this cluster's kubeconfig (one per file, shared by the tests)."""
        key = (str(self.kubeconfig), self.kubeconfig.stat().st_mtime_ns)
        with _clients_lock:
            if key not in _clients:
                _clients[key] = Kube(str(self.kubeconfig))
            return _clients[key]

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
