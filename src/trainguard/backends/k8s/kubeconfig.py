"""Where the API server is and who we are to it, read without the official client (whose import alone costs
the operator 10-20 MiB and a fifth of a second): the pod's service account in a cluster, else a kubeconfig file.

``load`` reads what client-go reads for the common cases: a context's cluster (server, its CA as a file or
inline, ``insecure-skip-tls-verify``, ``tls-server-name``) and user (a client certificate and key as files or
inline, a bearer token or token file, basic auth). A kubeconfig that needs more (a user with an ``exec`` plugin
or an ``auth-provider``, several files to merge, a proxy, a field this module does not know) raises
``NeedsOfficialClient``: the caller then loads it with the ``kubernetes`` package, as before. A missing or
broken one raises ``ConfigError``, whose message names the file, the field and the fix.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import logging
import os
import shutil
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml

log = logging.getLogger(__name__)

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_PATH = f"{SERVICE_ACCOUNT}/token"
CA_PATH = f"{SERVICE_ACCOUNT}/ca.crt"
ENV_HOST = "KUBERNETES_SERVICE_HOST"
ENV_PORT = "KUBERNETES_SERVICE_PORT"
ENV_KUBECONFIG = "KUBECONFIG"
DEFAULT_KUBECONFIG = "~/.kube/config"
#: How often a token file is read again: the kubelet rotates a pod's bound service account token (valid about
#: an hour) in place, and client-go re-reads it every minute.
TOKEN_REREAD_SECONDS = 60.0

#: The fields of a cluster and of a user that ``load`` reads or may ignore; any other one (``proxy-url``,
#: ``exec``, ``auth-provider``, impersonation) is for the official client.
CLUSTER_FIELDS = frozenset(
    {
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "tls-server-name",
        "disable-compression",  # we never ask for compression
        "extensions",
    }
)
USER_FIELDS = frozenset(
    {
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "token",
        "tokenFile",
        "username",
        "password",
        "extensions",
    }
)
FIX_KUBECONFIG = f"pass --kubeconfig FILE, or set ${ENV_KUBECONFIG}, naming a kubeconfig (what kubectl uses)"


class ConfigError(Exception):
    """A kubeconfig (or the service account) that cannot be used: the message names the file, field and fix."""


class NeedsOfficialClient(Exception):
    """A configuration this module does not read itself; the message says what needs the official client."""


@dataclass(frozen=True)
class Material:
    """A certificate, key or token: a file (read when needed) or the bytes written inline."""

    where: str  #: the field it is written in (``users[name=me].user.client-key-data``), for error messages
    path: str = ""  #: when no data
    data: bytes | None = field(default=None, repr=False)

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        with open(self.path, "rb") as file:
            return file.read()


@dataclass(frozen=True)
class Credentials:
    """The API server's address, how to trust it, and how to prove who we are."""

    server: str  #: the base URL, no trailing slash (it may carry a path prefix)
    source: str  #: "kubeconfig FILE" or "the pod's service account", for error messages
    ca: Material | None = None  #: None: the system's CAs
    insecure: bool = False
    server_name: str | None = None  #: the name the server's certificate must carry, when not the URL's host
    client_cert: Material | None = None
    client_key: Material | None = None
    token: Material | None = None
    basic: tuple[str, str] | None = field(default=None, repr=False)

    def tls_context(self) -> ssl.SSLContext:
        """The TLS settings of every connection, loaded once; ConfigError for a CA or key pair that is not one."""
        # The server's name checked and its certificate required, unless insecure.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            if self.ca is None:
                context.load_default_certs()
            else:
                try:
                    load_ca(context, self.ca)
                except (OSError, ValueError, ssl.SSLError) as error:
                    raise ConfigError(
                        f"{self.source}: {self.ca.where}: not a PEM certificate ({error}); give the API server's "
                        "CA certificate (kubectl config view --raw shows what kubectl uses)"
                    ) from None
        if self.client_cert is not None and self.client_key is not None:
            load_key_pair(context, self.client_cert, self.client_key, self.source)
        return context

    def authorization(self, clock: Callable[[], float] = time.monotonic) -> Authorization:
        return Authorization(self, clock)


class Authorization:
    """The Authorization header of each request; a token file is read again every minute (it is rotated)."""

    def __init__(self, credentials: Credentials, clock: Callable[[], float]) -> None:
        self._token = credentials.token
        self._clock = clock
        self._next_read = clock() + TOKEN_REREAD_SECONDS
        self._header: str | None = None
        if self._token is not None:
            self._header = f"Bearer {token_text(self._token, credentials.source)}"
        elif credentials.basic is not None:
            user, password = credentials.basic
            self._header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self._source = credentials.source

    def header(self) -> str | None:
        token = self._token
        if token is None or not token.path:
            return self._header
        now = self._clock()
        if now >= self._next_read:
            # Threads that race here each read the file; either answer is current.
            self._next_read = now + TOKEN_REREAD_SECONDS
            try:
                self._header = f"Bearer {token_text(token, self._source)}"
            except ConfigError as error:  # caught mid-rotation, say: keep the last one, try again next minute
                log.warning("keeping the last token: %s", error)
        return self._header


def token_text(token: Material, source: str) -> str:
    where = f"{source}: {token.where}" + (f" ({token.path})" if token.path else "")
    try:
        text = token.read().decode().strip()
    except OSError as error:
        raise ConfigError(f"{where}: cannot read the token: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: the token is not text") from None
    if not text:
        raise ConfigError(f"{where}: the token is empty")
    return text


def load_ca(context: ssl.SSLContext, ca: Material) -> None:
    if ca.path:
        context.load_verify_locations(cafile=ca.path)
        return
    data = ca.read()
    try:
        context.load_verify_locations(cadata=data.decode("ascii"))  # PEM
    except UnicodeDecodeError:
        context.load_verify_locations(cadata=data)  # DER


def load_key_pair(context: ssl.SSLContext, cert: Material, key: Material, source: str) -> None:
    """``load_cert_chain`` reads files only: inline ones go to a private directory for as long as it reads."""
    scratch = None
    try:
        paths = []
        for material in (cert, key):
            if material.path:
                paths.append(material.path)
                continue
            scratch = scratch or tempfile.mkdtemp(prefix="trainguard-kube-")  # mode 0700
            path = os.path.join(scratch, material.where.rsplit(".", 1)[-1])
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as file:
                file.write(material.read())
            paths.append(path)
        context.load_cert_chain(paths[0], paths[1])
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(
            f"{source}: {cert.where} and {key.where}: not a certificate and its private key ({error}); "
            "give the PEM files (or their base64 in the -data fields) of a pair that belong together"
        ) from None
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


# ---- finding the configuration -----------------------------------------------------------------------------


def load(kubeconfig: str | None) -> Credentials:
    """The file ``kubeconfig``; with None, the pod's service account in a cluster, else $KUBECONFIG, else
    ~/.kube/config (what the official client did)."""
    return resolve(kubeconfig, os.environ, TOKEN_PATH, CA_PATH)


def resolve(kubeconfig: str | None, environ: Mapping[str, str], token_path: str, ca_path: str) -> Credentials:
    credentials = None
    if kubeconfig is None:
        credentials = in_cluster(environ, token_path, ca_path)
        kubeconfig = environ.get(ENV_KUBECONFIG) or DEFAULT_KUBECONFIG
    if credentials is None:
        credentials = from_file(kubeconfig, environ)
    proxy = proxy_for(credentials.server, environ)
    if proxy is not None:
        raise NeedsOfficialClient(f"{credentials.source}: ${proxy} names a proxy for {credentials.server}")
    return credentials


def in_cluster(environ: Mapping[str, str], token_path: str, ca_path: str) -> Credentials | None:
    """The pod's service account, or None when not in a pod (no service address, token or CA)."""
    host, port = environ.get(ENV_HOST), environ.get(ENV_PORT)
    if not host or not port:
        return None
    if not all(os.path.isfile(path) and os.path.getsize(path) > 0 for path in (token_path, ca_path)):
        return None
    host = f"[{host}]" if ":" in host or "%" in host else host
    source = "the pod's service account"
    token = Material(where="token", path=token_path)
    token_text(token, source)
    return Credentials(
        server=f"https://{host}:{port}", source=source, ca=Material(where="ca.crt", path=ca_path), token=token
    )


def from_file(kubeconfig: str, environ: Mapping[str, str]) -> Credentials:
    paths = [kubeconfig] if os.path.isfile(expand(kubeconfig, environ)) else kubeconfig.split(os.pathsep)
    paths = [path for path in paths if path]
    if len(paths) > 1:
        raise NeedsOfficialClient(f"kubeconfig {kubeconfig}: several files to merge")
    path = os.path.abspath(expand(paths[0] if paths else DEFAULT_KUBECONFIG, environ))
    source = f"kubeconfig {path}"
    try:
        with open(path, "rb") as file:
            text = file.read()
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such file; {FIX_KUBECONFIG}") from None
    except OSError as error:
        raise ConfigError(f"{source}: cannot read it: {error.strerror}") from None
    try:
        document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: not YAML: {error}") from None
    if not isinstance(document, dict):
        raise ConfigError(
            f"{source}: not a kubeconfig (expected a mapping with clusters, contexts and users)"
        )
    return parse(document, os.path.dirname(path), source)


def expand(path: str, environ: Mapping[str, str]) -> str:
    if path == "~" or path.startswith("~/"):
        return (environ.get("HOME") or os.path.expanduser("~")) + path[1:]
    return path


# ---- reading a kubeconfig ------------------------------------------------------------------------------------


def parse(document: dict[str, Any], base: str, source: str) -> Credentials:
    """The current context's credentials; relative file names are relative to ``base``."""
    name = document.get("current-context")
    if not name or not isinstance(name, str):
        raise ConfigError(
            f"{source}: current-context: not set; name one of its contexts there (kubectl config use-context NAME)"
        )
    context = named(document, "contexts", name, source, "context", f"current-context {name!r}")
    cluster_name = context.get("cluster")
    if not cluster_name or not isinstance(cluster_name, str):
        raise ConfigError(
            f"{source}: contexts[name={name}].context.cluster: not set; name one of its clusters"
        )
    cluster = named(document, "clusters", cluster_name, source, "cluster", f"context {name!r}")
    user_name = context.get("user")
    user: dict[str, Any] = {}
    if user_name:
        user = named(document, "users", str(user_name), source, "user", f"context {name!r}")
    cluster_at, user_at = f"clusters[name={cluster_name}].cluster", f"users[name={user_name}].user"
    for fields, known, at in ((cluster, CLUSTER_FIELDS, cluster_at), (user, USER_FIELDS, user_at)):
        unknown = sorted(key for key in fields if key not in known)
        if unknown:
            raise NeedsOfficialClient(f"{source}: {at}: {', '.join(unknown)}")

    server = cluster.get("server")
    if not server or not isinstance(server, str):
        raise ConfigError(f"{source}: {cluster_at}.server: not set; give the API server's https://HOST:PORT")
    if not server.startswith(("https://", "http://")):
        raise NeedsOfficialClient(f"{source}: {cluster_at}.server: {server!r} has no https:// or http://")
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):
        raise ConfigError(
            f"{source}: {cluster_at}.insecure-skip-tls-verify: {insecure!r}; give true or false"
        )
    server_name = cluster.get("tls-server-name")
    if server_name is not None and not isinstance(server_name, str):
        raise ConfigError(f"{source}: {cluster_at}.tls-server-name: {server_name!r}; give a host name")

    https = server.startswith("https://")  # the official client reads no CA or client certificate for http
    read = Fields(source, base)
    ca = read.material(cluster, cluster_at, "certificate-authority") if https and not insecure else None
    cert = read.material(user, user_at, "client-certificate") if https else None
    key = read.material(user, user_at, "client-key") if https else None
    if (cert is None) != (key is None):
        given, missing = (
            ("client-certificate", "client-key") if key is None else ("client-key", "client-certificate")
        )
        raise ConfigError(f"{source}: {user_at}: {given} without {missing}; give both, or neither")
    token = read.material(user, user_at, "tokenFile", data_key="token")
    if token is not None:
        token_text(token, source)
    username, password = user.get("username"), user.get("password")
    return Credentials(
        server=server.rstrip("/"),
        source=source,
        ca=ca,
        insecure=insecure,
        server_name=server_name or None,
        client_cert=cert,
        client_key=key,
        token=token,
        basic=(str(username), str(password)) if token is None and username and password else None,
    )


@dataclass(frozen=True)
class Fields:
    """Reads the file-or-data fields of one kubeconfig."""

    source: str
    base: str  #: the kubeconfig's directory: relative file names are relative to it

    def material(self, fields: dict[str, Any], at: str, file_key: str, data_key: str = "") -> Material | None:
        """The data field if set (client-go prefers it; base64 but for ``token``), else the file."""
        data_key = data_key or f"{file_key}-data"
        data, path = fields.get(data_key), fields.get(file_key)
        if data:
            if not isinstance(data, str):
                raise ConfigError(f"{self.source}: {at}.{data_key}: not a string")
            if data_key == "token":
                return Material(where=f"{at}.{data_key}", data=data.encode())
            try:
                return Material(where=f"{at}.{data_key}", data=base64.b64decode(data))
            except (binascii.Error, ValueError):
                raise ConfigError(
                    f"{self.source}: {at}.{data_key}: not base64; give the PEM file's base64 (base64 -w0 FILE)"
                ) from None
        if not path:
            return None
        if not isinstance(path, str):
            raise ConfigError(f"{self.source}: {at}.{file_key}: not a file name")
        full = os.path.normpath(os.path.join(self.base, path))
        if not os.path.isfile(full):
            raise ConfigError(
                f"{self.source}: {at}.{file_key}: no file {full}; fix the name (a relative one is relative to "
                f"the kubeconfig's directory) or give the content in {data_key}"
            )
        return Material(where=f"{at}.{file_key}", path=full)


def named(
    document: dict[str, Any], kind: str, name: str, source: str, inner: str, asked_by: str
) -> dict[str, Any]:
    """The ``inner`` mapping of the entry ``name`` of the list ``kind`` (``contexts[name=x].context``)."""
    entries = document.get(kind) or []
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: {kind}: not a list")
    found = [entry for entry in entries if isinstance(entry, dict) and entry.get("name") == name]
    if not found:
        names = [str(entry.get("name")) for entry in entries if isinstance(entry, dict)]
        has = f"it has {', '.join(names)}" if names else "it has none"
        raise ConfigError(
            f"{source}: {kind}: no {inner} named {name!r} ({asked_by} names it; {has}); fix the name"
        )
    if len(found) > 1:
        raise ConfigError(f"{source}: {kind}: {len(found)} entries named {name!r}; keep one")
    value = found[0].get(inner) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {kind}[name={name}].{inner}: not a mapping")
    return {key: item for key, item in value.items() if item is not None}


# ---- proxies -------------------------------------------------------------------------------------------------


def proxy_for(server: str, environ: Mapping[str, str]) -> str | None:
    """The environment variable naming a proxy for ``server`` (the official client honours them), or None.

    Only a bypass that is certain counts (``*``, the host, a domain it is in, a network its address is in): a
    proxy this answer keeps is left to the official client, which reads $NO_PROXY in full."""
    parts = urlsplit(server)
    proxy = next(
        (
            name
            for name in (f"{parts.scheme}_proxy", f"{parts.scheme.upper()}_PROXY", "all_proxy", "ALL_PROXY")
            if environ.get(name)
        ),
        None,
    )
    if proxy is None:
        return None
    host = (parts.hostname or "").lower()
    for entry in (environ.get("no_proxy") or environ.get("NO_PROXY") or "").split(","):
        entry = entry.strip().lower()
        if not entry:
            continue
        if entry == "*" or host == entry.lstrip(".") or host.endswith("." + entry.lstrip(".")):
            return None
        try:
            if ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False):
                return None
        except ValueError:
            pass
    return proxy
