"""trainguard's own reading of kubeconfigs and of the pod's service account (``backends.k8s.kubeconfig``): the
fields it reads, the errors it gives, and what it leaves to the official client."""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.unit.k8s.kubeconfigs import SERVER, document, write
from tests.unit.k8s.pki import Pki, make_pki
from trainguard.backends.k8s import kubeconfig
from trainguard.backends.k8s.client import Kube, OfficialConnection
from trainguard.backends.k8s.kubeconfig import ConfigError, Credentials, NeedsOfficialClient


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@dataclass(frozen=True)
class Files:
    """A kubeconfig's directory, with its certificates and a token file under pki/."""

    dir: Path
    pki: Pki

    @property
    def config(self) -> Path:
        return self.dir / "config"

    def at(self, name: str) -> str:
        return str(self.dir / "pki" / name)


@pytest.fixture
def files(tmp_path: Path, pki: Pki) -> Files:
    files = Files(tmp_path / "kube", pki)
    (files.dir / "pki").mkdir(parents=True)
    for name, content in {
        "ca.crt": pki.ca.cert,
        "client.crt": pki.client.cert,
        "client.key": pki.client.key,
        "token": b"file-token\n",
    }.items():
        Path(files.at(name)).write_bytes(content)
    return files


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def load_file(path: str, environ: dict[str, str] | None = None) -> Credentials:
    return kubeconfig.resolve(path, environ or {}, "/nonexistent/token", "/nonexistent/ca.crt")


# ---- the fields read -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    cluster: Callable[[Files], dict[str, Any]]
    user: Callable[[Files], dict[str, Any]] | None
    ca: str | None  #: "file", "data" or None (the system's)
    client: str | None  #: "file", "data" or None
    header: str | None  #: the Authorization header
    insecure: bool = False
    server_name: str | None = None


def ca_file(f: Files) -> dict[str, Any]:
    return {"server": SERVER, "certificate-authority": f.at("ca.crt")}


CASES = {
    "ca and client certificate as files": Case(
        ca_file,
        lambda f: {"client-certificate": f.at("client.crt"), "client-key": f.at("client.key")},
        ca="file",
        client="file",
        header=None,
    ),
    "ca and client certificate inline, base64": Case(
        lambda f: {"server": SERVER, "certificate-authority-data": b64(f.pki.ca.cert)},
        lambda f: {
            "client-certificate-data": b64(f.pki.client.cert),
            "client-key-data": b64(f.pki.client.key),
        },
        ca="data",
        client="data",
        header=None,
    ),
    "relative file names are relative to the kubeconfig's directory": Case(
        lambda f: {"server": SERVER, "certificate-authority": "pki/ca.crt"},
        lambda f: {"client-certificate": "pki/client.crt", "client-key": "./pki/../pki/client.key"},
        ca="file",
        client="file",
        header=None,
    ),
    "inline data wins over a file": Case(
        lambda f: {
            "server": SERVER,
            "certificate-authority": "missing.crt",
            "certificate-authority-data": b64(f.pki.ca.cert),
        },
        lambda f: {
            "client-certificate": "missing.crt",
            "client-certificate-data": b64(f.pki.client.cert),
            "client-key": "missing.key",
            "client-key-data": b64(f.pki.client.key),
        },
        ca="data",
        client="data",
        header=None,
    ),
    "a token": Case(
        ca_file, lambda f: {"token": "inline-token"}, ca="file", client=None, header="Bearer inline-token"
    ),
    "a token file, relative": Case(
        ca_file, lambda f: {"tokenFile": "pki/token"}, ca="file", client=None, header="Bearer file-token"
    ),
    "a token wins over a token file and basic auth": Case(
        ca_file,
        lambda f: {"token": "inline-token", "tokenFile": "missing", "username": "me", "password": "pw"},
        ca="file",
        client=None,
        header="Bearer inline-token",
    ),
    "basic auth": Case(
        ca_file,
        lambda f: {"username": "me", "password": "secret"},
        ca="file",
        client=None,
        header="Basic " + b64(b"me:secret"),
    ),
    "a certificate and a token together": Case(
        ca_file,
        lambda f: {"client-certificate": f.at("client.crt"), "client-key": f.at("client.key"), "token": "t"},
        ca="file",
        client="file",
        header="Bearer t",
    ),
    "no user: anonymous, the system's CAs": Case(
        lambda f: {"server": SERVER}, None, ca=None, client=None, header=None
    ),
    "insecure-skip-tls-verify: no CA, no verification": Case(
        lambda f: {"server": SERVER, "insecure-skip-tls-verify": True},
        lambda f: {"token": "t"},
        ca=None,
        client=None,
        header="Bearer t",
        insecure=True,
    ),
    "tls-server-name": Case(
        lambda f: {**ca_file(f), "tls-server-name": "kubernetes.default.svc"},
        lambda f: {"token": "t"},
        ca="file",
        client=None,
        header="Bearer t",
        server_name="kubernetes.default.svc",
    ),
    "a plain http server reads no TLS fields": Case(
        lambda f: {"server": "http://127.0.0.1:8080/", "certificate-authority": "missing.crt"},
        lambda f: {"client-certificate": "missing.crt", "token": "t"},
        ca=None,
        client=None,
        header="Bearer t",
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_the_fields_of_a_kubeconfig(
    name: str, files: Files, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    case = CASES[name]
    monkeypatch.chdir(tmp_path)  # relative names must not be read from the working directory
    path = write(files.config, document(case.cluster(files), case.user(files) if case.user else None))
    credentials = load_file(path)

    assert credentials.source == f"kubeconfig {path}"
    assert credentials.server == case.cluster(files)["server"].rstrip("/")
    assert credentials.insecure == case.insecure
    assert credentials.server_name == case.server_name
    assert credentials.authorization().header() == case.header
    ca = credentials.ca
    if case.ca is None:
        assert ca is None
    else:
        assert ca is not None
        assert (ca.path, ca.data) == (
            (files.at("ca.crt"), None) if case.ca == "file" else ("", files.pki.ca.cert)
        )
    cert, key = credentials.client_cert, credentials.client_key
    if case.client is None:
        assert (cert, key) == (None, None)
    else:
        assert cert is not None
        assert key is not None
        if case.client == "file":
            assert (cert.path, key.path) == (files.at("client.crt"), files.at("client.key"))
        else:
            assert (cert.data, key.data) == (files.pki.client.cert, files.pki.client.key)
    if credentials.server.startswith("https://"):
        context = credentials.tls_context()
        assert context.verify_mode == (ssl.CERT_NONE if case.insecure else ssl.CERT_REQUIRED)
        if case.ca is not None:
            assert [dict(pair[0] for pair in c["subject"])["commonName"] for c in context.get_ca_certs()] == [
                "test-ca"
            ]


def test_an_inline_key_pair_is_loaded_from_a_private_directory_removed_at_once(
    files: Files, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    user = {
        "client-certificate-data": b64(files.pki.client.cert),
        "client-key-data": b64(files.pki.client.key),
    }
    credentials = load_file(write(files.config, document(ca_file(files), user)))
    credentials.tls_context()
    assert list(scratch.iterdir()) == []


# ---- errors --------------------------------------------------------------------------------------------------

ERRORS: dict[str, tuple[Callable[[Files, dict[str, Any]], None], list[str]]] = {
    "no current-context": (
        lambda f, d: d.pop("current-context"),
        ["current-context: not set", "use-context"],
    ),
    "current-context names no context": (
        lambda f, d: d.update({"current-context": "gone"}),
        ["contexts: no context named 'gone'", "current-context 'gone' names it", "it has ctx"],
    ),
    "the context names no cluster": (
        lambda f, d: d["contexts"][0]["context"].update(cluster="gone"),
        ["clusters: no cluster named 'gone'", "context 'ctx' names it", "it has c"],
    ),
    "the context names no user": (
        lambda f, d: d["contexts"][0]["context"].update(user="gone"),
        ["users: no user named 'gone'", "it has u"],
    ),
    "a context without a cluster": (
        lambda f, d: d["contexts"][0]["context"].pop("cluster"),
        ["contexts[name=ctx].context.cluster: not set"],
    ),
    "two clusters of one name": (
        lambda f, d: d["clusters"].append(d["clusters"][0]),
        ["clusters: 2 entries named 'c'"],
    ),
    "a cluster without a server": (
        lambda f, d: d["clusters"][0]["cluster"].pop("server"),
        ["clusters[name=c].cluster.server: not set", "https://HOST:PORT"],
    ),
    "a CA file that is not there": (
        lambda f, d: d["clusters"][0]["cluster"].update({"certificate-authority": "nope/ca.crt"}),
        [
            "clusters[name=c].cluster.certificate-authority: no file",
            "nope/ca.crt",
            "relative to the kubeconfig",
        ],
    ),
    "inline data that is not base64": (
        lambda f, d: d["users"][0]["user"].update({"client-key-data": "!!not base64!!"}),
        ["users[name=u].user.client-key-data: not base64"],
    ),
    "a certificate without its key": (
        lambda f, d: d["users"][0]["user"].pop("client-key"),
        ["users[name=u].user: client-certificate without client-key"],
    ),
    "insecure-skip-tls-verify that is no boolean": (
        lambda f, d: d["clusters"][0]["cluster"].update({"insecure-skip-tls-verify": "yes"}),
        ["insecure-skip-tls-verify: 'yes'; give true or false"],
    ),
    "an empty token file": (
        lambda f, d: (
            Path(f.at("token")).write_text(""),
            d["users"][0]["user"].update(tokenFile="pki/token"),
        ),
        ["users[name=u].user.tokenFile", "the token is empty"],
    ),
}


@pytest.mark.parametrize("name", ERRORS)
def test_a_broken_kubeconfig_is_one_clear_error(name: str, files: Files) -> None:
    change, expected = ERRORS[name]
    doc = document(
        ca_file(files), {"client-certificate": files.at("client.crt"), "client-key": files.at("client.key")}
    )
    change(files, doc)
    path = write(files.config, doc)
    with pytest.raises(ConfigError) as raised:
        load_file(path)
    assert str(raised.value).startswith(f"kubeconfig {path}: ")
    for part in expected:
        assert part in str(raised.value)


TLS_ERRORS: dict[str, tuple[Callable[[Files], tuple[dict[str, Any], dict[str, Any]]], list[str]]] = {
    "a CA that is no certificate": (
        lambda f: ({"server": SERVER, "certificate-authority-data": b64(b"hello")}, {}),
        ["clusters[name=c].cluster.certificate-authority-data: not a PEM certificate"],
    ),
    "a key that is not the certificate's": (
        lambda f: (
            ca_file(f),
            {"client-certificate": f.at("client.crt"), "client-key-data": b64(f.pki.other_key)},
        ),
        [
            "users[name=u].user.client-certificate and users[name=u].user.client-key-data: not a certificate and its"
        ],
    ),
}


@pytest.mark.parametrize("name", TLS_ERRORS)
def test_tls_material_that_does_not_load_is_one_clear_error(name: str, files: Files) -> None:
    make, expected = TLS_ERRORS[name]
    cluster, user = make(files)
    path = write(files.config, document(cluster, user))
    with pytest.raises(ConfigError) as raised:
        Kube(path)
    assert str(raised.value).startswith(f"kubeconfig {path}: ")
    for part in expected:
        assert part in str(raised.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("{unclosed: [", "not YAML"), ("- a list", "not a kubeconfig"), ("", "not a kubeconfig")],
)
def test_a_file_that_is_no_kubeconfig(text: str, expected: str, tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(text)
    with pytest.raises(ConfigError, match=expected):
        load_file(str(path))


def test_a_missing_kubeconfig_says_how_to_name_one(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError) as raised:
        load_file(str(missing))
    assert str(raised.value) == f"kubeconfig {missing}: no such file; {kubeconfig.FIX_KUBECONFIG}"


# ---- what is left to the official client ---------------------------------------------------------------------

OFFICIAL: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, str]]] = {
    "an exec plugin": ({"server": SERVER}, {"exec": {"command": "get-token", "apiVersion": "v1"}}, {}),
    "an auth provider": ({"server": SERVER}, {"auth-provider": {"name": "oidc"}}, {}),
    "impersonation": ({"server": SERVER}, {"token": "t", "as": "someone"}, {}),
    "a proxy-url": ({"server": SERVER, "proxy-url": "http://proxy:3128"}, {}, {}),
    "a server without a scheme": ({"server": "203.0.113.7:6443"}, {}, {}),
    "$HTTPS_PROXY": ({"server": SERVER}, {}, {"HTTPS_PROXY": "http://proxy:3128"}),
    "$all_proxy, $NO_PROXY for others": (
        {"server": SERVER},
        {},
        {"all_proxy": "http://proxy:3128", "NO_PROXY": "example.com,10.0.0.0/8"},
    ),
}


@pytest.mark.parametrize("name", OFFICIAL)
def test_what_only_the_official_client_reads_is_left_to_it(name: str, tmp_path: Path) -> None:
    cluster, user, environ = OFFICIAL[name]
    path = write(tmp_path / "config", document(cluster, user))
    with pytest.raises(NeedsOfficialClient):
        load_file(path, environ)


def test_several_files_in_kubeconfig_are_merged_by_the_official_client(tmp_path: Path) -> None:
    one = write(tmp_path / "one", document({"server": SERVER}))
    two = write(tmp_path / "two", document({"server": SERVER}))
    environ = {"KUBECONFIG": f"{one}:{two}"}
    with pytest.raises(NeedsOfficialClient, match="several files"):
        kubeconfig.resolve(None, environ, "/nonexistent/token", "/nonexistent/ca.crt")
    assert kubeconfig.resolve(None, {"KUBECONFIG": f"{one}:"}, "/x", "/y").source == f"kubeconfig {one}"


@pytest.mark.parametrize(
    "no_proxy", ["*", "203.0.113.7", "203.0.113.0/24", "example.com, 203.0.113.7", " .203.0.113.7"]
)
def test_a_proxy_the_server_bypasses_is_no_reason_for_the_official_client(
    no_proxy: str, tmp_path: Path
) -> None:
    path = write(tmp_path / "config", document({"server": SERVER}))
    environ = {"https_proxy": "http://proxy:3128", "no_proxy": no_proxy}
    assert load_file(path, environ).server == SERVER


def test_a_user_with_an_exec_plugin_gets_the_official_client(tmp_path: Path) -> None:
    """The plugin is never found (the official client logs that): what counts is which loader was chosen."""
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(tmp_path / "no-plugin")}}
    kube = Kube(write(tmp_path / "config", document({"server": SERVER}, user)))
    try:
        assert isinstance(kube.connection, OfficialConnection)
    finally:
        kube.close()


def test_the_operator_and_a_kubeconfig_of_certificates_never_import_the_official_client(files: Files) -> None:
    user = {"client-certificate": "pki/client.crt", "client-key": "pki/client.key"}
    path = write(files.config, document(ca_file(files), user))
    code = (
        "import sys\n"
        "from trainguard.backends.k8s.operator import Operator\n"
        "from trainguard.backends.k8s.client import Kube, OwnConnection\n"
        f"kube = Kube({path!r})\n"
        "assert isinstance(kube.connection, OwnConnection)\n"
        "kube.close()\n"
        "print('kubernetes' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr
