"""``Kube`` over trainguard's own connection, against an HTTPS server on loopback that wants a client certificate:
the CA and the key pair inline in the kubeconfig, a server certificate that names only tls-server-name, and the
bearer token, watch streaming and API errors on the way."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.unit.k8s.pki import SERVER_NAME, Pki, make_pki
from trainguard.backends.k8s.client import ApiError, Connection, Kube, OfficialConnection, OwnConnection


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        cert = self.connection.getpeercert()  # type: ignore[attr-defined]
        subject = dict(pair[0] for pair in cert["subject"]) if cert else {}
        seen = {
            "authorization": self.headers.get("Authorization"),
            "client": subject.get("commonName"),
            "path": self.path,
        }
        if self.path.startswith("/api/v1/pods?") and "watch=true" in self.path:
            lines = b"".join(
                json.dumps({"type": "ADDED", "object": {"metadata": {"name": f"p{n}"}}}).encode() + b"\n"
                for n in range(3)
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in (lines[:10], lines[10:]):  # a line cut across chunks
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        status, body = (200, {"kind": "APIVersions", "seen": seen}) if self.path == "/api" else (404, {})
        if status == 404:
            body = {"kind": "Status", "message": f"{self.path} not found"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture
def server(pki: Pki, tmp_path: Path) -> Iterator[str]:
    (tmp_path / "server.crt").write_bytes(pki.server.cert)
    (tmp_path / "server.key").write_bytes(pki.server.key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    context.load_verify_locations(cadata=pki.ca.cert.decode())
    context.verify_mode = ssl.CERT_REQUIRED
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    path.write_text(
        json.dumps(
            {
                "current-context": "ctx",
                "clusters": [{"name": "c", "cluster": cluster}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return str(path)


def exec_plugin(tmp_path: Path, token: str) -> dict[str, Any]:
    """A user's ``exec`` entry whose plugin gives ``token``: only the official client reads it."""
    plugin = tmp_path / "plugin"
    status = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token},
    }
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(status)}'\n")
    plugin.chmod(0o755)
    return {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}


@pytest.mark.parametrize("through", [OwnConnection, OfficialConnection])
def test_inline_credentials_reach_the_server_by_its_tls_server_name(
    server: str, pki: Pki, tmp_path: Path, through: type[Connection]
) -> None:
    """trainguard's own connection (a token), and the official client's (an exec plugin gives the token): the
    same requests, errors and watch."""
    cluster = {
        "server": server,
        "certificate-authority-data": b64(pki.ca.cert),
        "tls-server-name": SERVER_NAME,
    }
    user: dict[str, Any] = {
        "client-certificate-data": b64(pki.client.cert),
        "client-key-data": b64(pki.client.key),
    }
    if through is OwnConnection:
        user["token"] = "secret"
    else:
        user["exec"] = exec_plugin(tmp_path, "secret")
    kube = Kube(kubeconfig(tmp_path / "config", cluster, user))
    try:
        assert isinstance(kube.connection, through)
        assert kube.get("/api")["seen"] == {
            "authorization": "Bearer secret",
            "client": "tester",
            "path": "/api",
        }
        with pytest.raises(ApiError) as raised:
            kube.get("/api/v1/nodes/gone")
        assert (raised.value.status, raised.value.message) == (404, "/api/v1/nodes/gone not found")
        events = list(kube.watch("/api/v1/pods", "7", {}))
        assert [event["object"]["metadata"]["name"] for event in events] == ["p0", "p1", "p2"]
    finally:
        kube.close()


def test_without_tls_server_name_the_certificate_does_not_name_the_address(
    server: str, pki: Pki, tmp_path: Path
) -> None:
    cluster = {"server": server, "certificate-authority-data": b64(pki.ca.cert)}
    user = {"client-certificate-data": b64(pki.client.cert), "client-key-data": b64(pki.client.key)}
    kube = Kube(kubeconfig(tmp_path / "config", cluster, user))
    try:
        with pytest.raises(ApiError) as raised:
            kube.get("/api")
        assert raised.value.status == 0
        assert "certificate" in raised.value.message.lower()
    finally:
        kube.close()
