"""The credentials trainguard reads itself (``backends.k8s.kubeconfig``), against the test cluster's API server:
certificates as files, inline and by relative names, a service account's token inline, in a file and as a pod
reads it (the service account's mount), and a token the server does not know."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.k8s.cluster import KubeCluster
from trainguard.backends.k8s import kubeconfig
from trainguard.backends.k8s.client import ApiError, Kube, OwnConnection
from trainguard.backends.k8s.transport import Timeouts

ACCOUNT = "trainguard-credentials-test"
NAMESPACES = "/api/v1/namespaces/default"


@dataclass(frozen=True)
class Cluster:
    """The test cluster's address and credentials, as its kubeconfig gives them."""

    server: str
    ca: Path
    cert: Path
    key: Path
    token: str  #: the service account ACCOUNT's (bound to the view role)


@pytest.fixture(scope="module")
def cluster(kube_cluster: KubeCluster) -> Iterator[Cluster]:
    config = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    kube_cluster.kubectl("-n", "default", "create", "serviceaccount", ACCOUNT)
    kube_cluster.kubectl(
        "create", "clusterrolebinding", ACCOUNT, "--clusterrole=view", f"--serviceaccount=default:{ACCOUNT}"
    )
    try:
        yield Cluster(
            server=server["server"],
            ca=Path(server["certificate-authority"]),
            cert=Path(user["client-certificate"]),
            key=Path(user["client-key"]),
            token=kube_cluster.kubectl("-n", "default", "create", "token", ACCOUNT).strip(),
        )
    finally:
        kube_cluster.kubectl("delete", "clusterrolebinding", ACCOUNT, "--ignore-not-found")
        kube_cluster.kubectl("-n", "default", "delete", "serviceaccount", ACCOUNT, "--ignore-not-found")


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "test",
                "clusters": [{"name": "test", "cluster": cluster}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "me"}}],
                "users": [{"name": "me", "user": user}],
            }
        )
    )
    return str(path)


def relative(path: Path, to: Path) -> str:
    return os.path.relpath(path, to)


KUBECONFIGS: dict[str, Callable[[Cluster, Path], tuple[dict[str, Any], dict[str, Any]]]] = {
    "certificates as files": lambda c, d: (
        {"server": c.server, "certificate-authority": str(c.ca)},
        {"client-certificate": str(c.cert), "client-key": str(c.key)},
    ),
    "certificates inline": lambda c, d: (
        {"server": c.server, "certificate-authority-data": b64(c.ca)},
        {"client-certificate-data": b64(c.cert), "client-key-data": b64(c.key)},
    ),
    "certificates by names relative to the kubeconfig": lambda c, d: (
        {"server": c.server, "certificate-authority": relative(c.ca, d)},
        {"client-certificate": relative(c.cert, d), "client-key": relative(c.key, d)},
    ),
    "a service account's token": lambda c, d: (
        {"server": c.server, "certificate-authority": str(c.ca)},
        {"token": c.token},
    ),
    "a service account's token file": lambda c, d: (
        {"server": c.server, "certificate-authority-data": b64(c.ca)},
        {"tokenFile": "token"},  # the test writes it beside the kubeconfig
    ),
}


@pytest.mark.parametrize("name", KUBECONFIGS)
def test_each_kind_of_kubeconfig_reaches_the_api_server(name: str, cluster: Cluster, tmp_path: Path) -> None:
    directory = tmp_path / "kube"
    directory.mkdir()
    (directory / "token").write_text(cluster.token)
    kube = Kube(write(directory / "config", *KUBECONFIGS[name](cluster, directory)))
    try:
        assert isinstance(kube.connection, OwnConnection)
        assert kube.get(NAMESPACES)["metadata"]["name"] == "default"
        assert kube.list("/api/v1/namespaces/default/pods", limit=1)["kind"] == "PodList"
    finally:
        kube.close()


def test_a_token_the_server_does_not_know_is_401(cluster: Cluster, tmp_path: Path) -> None:
    kube = Kube(
        write(
            tmp_path / "config",
            {"server": cluster.server, "certificate-authority": str(cluster.ca)},
            {"token": "nobody"},
        )
    )
    try:
        with pytest.raises(ApiError) as raised:
            kube.get(NAMESPACES)
        assert raised.value.status == 401
    finally:
        kube.close()


def test_in_a_pod_the_service_accounts_token_and_ca(cluster: Cluster, tmp_path: Path) -> None:
    """What a pod's service account mount holds, read from a folder of the test's (it is /var/run/... in a pod)."""
    (tmp_path / "token").write_text(cluster.token)
    (tmp_path / "ca.crt").write_bytes(cluster.ca.read_bytes())
    address = urlsplit(cluster.server)
    environ = {"KUBERNETES_SERVICE_HOST": str(address.hostname), "KUBERNETES_SERVICE_PORT": str(address.port)}
    credentials = kubeconfig.resolve(None, environ, str(tmp_path / "token"), str(tmp_path / "ca.crt"))
    assert credentials.source == "the pod's service account"
    connection = OwnConnection(credentials)
    try:
        answer = connection.send("GET", NAMESPACES, {}, None, "application/json", Timeouts(30, 30))
        data = answer.read()
        answer.close()
        assert answer.status == 200, data
        assert json.loads(data)["metadata"]["name"] == "default"
    finally:
        connection.close()
