"""trainguard's own reading of the pod's service account (``backends.k8s.kubeconfig``): found in a pod, the
kubeconfig outside one, its token read again as the kubelet rotates it; and how requests are addressed."""

from __future__ import annotations

import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.unit.k8s.kubeconfigs import SERVER, document, write
from tests.unit.k8s.pki import Pki, make_pki
from trainguard._version import __version__
from trainguard.backends.k8s import kubeconfig
from trainguard.backends.k8s.client import Kube, OwnConnection
from trainguard.backends.k8s.kubeconfig import ConfigError, Credentials
from trainguard.backends.k8s.transport import Timeouts


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


IN_CLUSTER_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


@pytest.fixture
def account(tmp_path: Path, pki: Pki) -> tuple[str, str]:
    token, ca = tmp_path / "sa" / "token", tmp_path / "sa" / "ca.crt"
    token.parent.mkdir()
    token.write_text("pod-token")
    ca.write_bytes(pki.ca.cert)
    return str(token), str(ca)


@pytest.mark.parametrize(
    ("environ", "server"),
    [
        (IN_CLUSTER_ENV, "https://10.96.0.1:443"),
        ({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}, "https://[fd00::1]:6443"),
    ],
)
def test_in_a_pod_the_service_account(environ: dict[str, str], server: str, account: tuple[str, str]) -> None:
    token, ca = account
    credentials = kubeconfig.resolve(None, environ, token, ca)
    assert credentials.server == server
    assert credentials.source == "the pod's service account"
    assert credentials.ca is not None
    assert credentials.ca.path == ca
    assert credentials.authorization().header() == "Bearer pod-token"
    assert credentials.tls_context().verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize(
    "missing",
    ["KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "token", "ca.crt"],
)
def test_outside_a_pod_the_kubeconfig(missing: str, account: tuple[str, str], tmp_path: Path) -> None:
    token, ca = account
    environ = {key: value for key, value in IN_CLUSTER_ENV.items() if key != missing}
    if missing in ("token", "ca.crt"):
        Path(token if missing == "token" else ca).unlink()
    path = write(tmp_path / "config", document({"server": SERVER}))
    credentials = kubeconfig.resolve(None, {**environ, "KUBECONFIG": path}, token, ca)
    assert credentials.source == f"kubeconfig {path}"
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    default = write(home / ".kube" / "config", document({"server": SERVER}))
    assert (
        kubeconfig.resolve(None, {**environ, "HOME": str(home)}, token, ca).source == f"kubeconfig {default}"
    )


def test_the_token_file_is_read_again_every_minute(account: tuple[str, str]) -> None:
    token, ca = account
    now = [1000.0]
    authorization = kubeconfig.resolve(None, IN_CLUSTER_ENV, token, ca).authorization(lambda: now[0])
    assert authorization.header() == "Bearer pod-token"
    Path(token).write_text("rotated\n")
    now[0] += kubeconfig.TOKEN_REREAD_SECONDS - 1
    assert authorization.header() == "Bearer pod-token"
    now[0] += 1
    assert authorization.header() == "Bearer rotated"
    Path(token).unlink()  # between two rotations: the last token stays
    now[0] += kubeconfig.TOKEN_REREAD_SECONDS
    assert authorization.header() == "Bearer rotated"
    Path(token).write_text("again")
    now[0] += kubeconfig.TOKEN_REREAD_SECONDS
    assert authorization.header() == "Bearer again"


def test_requests_name_the_server_path_and_query() -> None:
    seen: list[tuple[str, str | None, str | None, str | None, str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            headers = self.headers
            seen.append(
                (
                    self.path,
                    headers["Authorization"],
                    headers["Host"],
                    headers["Accept"],
                    headers["User-Agent"],
                )
            )
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    credentials = Credentials(
        server=f"http://127.0.0.1:{port}/prefix",
        source="test",
        token=kubeconfig.Material(where="token", data=b"t"),
    )
    connection = OwnConnection(credentials)
    try:
        query = {"labelSelector": "a=b,c in (x y)", "watch": True, "limit": 5}
        answer = connection.send("GET", "/api/v1/pods", query, None, "application/json", Timeouts(10, 10))
        assert (answer.status, answer.read()) == (200, b"{}")
        answer.close()
    finally:
        connection.close()
        httpd.shutdown()
        httpd.server_close()
    assert seen == [
        (
            "/prefix/api/v1/pods?labelSelector=a%3Db%2Cc%20in%20%28x%20y%29&watch=true&limit=5",
            "Bearer t",
            f"127.0.0.1:{port}",
            "application/json",
            f"trainguard/{__version__}",
        )
    ]


def test_without_the_official_client_an_exec_user_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # not installed
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "get-token"}}
    path = write(tmp_path / "config", document({"server": SERVER}, user))
    with pytest.raises(ConfigError) as raised:
        Kube(path)
    assert str(raised.value) == (
        f"kubeconfig {path}: users[name=u].user: exec: reading that needs the Kubernetes client (kubernetes): "
        "pip install 'trainguard[k8s]'"
    )
