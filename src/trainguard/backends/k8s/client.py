"""The one place that talks to the Kubernetes API: plain JSON over one urllib3 connection pool.

Objects are plain dicts (what ``kubectl get -o json`` shows), for pods, nodes and custom resources alike: the
operator reads a handful of fields, and typed models would cost a conversion per watch event at scale. They are
read and written by pydantic's JSON parser and serializer (Rust, already loaded for the job's models), which take
less of the operator's CPU than the standard library's for every watch event and answer.
Errors come back as ``ApiError`` with the HTTP status, so callers can tell a conflict (409) or a missing
object (404) from a failure.

The credentials come from ``kubeconfig`` (the service account, or a kubeconfig's certificates and tokens);
only a kubeconfig that needs more (an exec plugin, say) loads the official ``kubernetes`` package, whose
import costs more memory than the rest of the operator's client side.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from pydantic_core import from_json, to_json

from trainguard._version import __version__
from trainguard.backends.k8s import kubeconfig as kubeconfigs

Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = f"trainguard/{__version__}"
#: Reconcile workers, the apply pool and the watches each hold a connection: a pool smaller than that opens
#: (and throws away) a TLS connection per request under load.
POOL_SIZE = 64

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Connection:
    """Where requests go and with which headers: URLs, credentials and the pool of connections."""

    pool: urllib3.PoolManager

    def prepare(
        self, method: str, path: str, query: dict[str, Any], content_type: str
    ) -> tuple[str, dict[str, str]]:
        raise NotImplementedError

    def close(self) -> None:
        self.pool.clear()


class OwnConnection(Connection):
    """Credentials that ``kubeconfig`` read, over a pool whose TLS settings are loaded once."""

    def __init__(self, credentials: kubeconfigs.Credentials) -> None:
        self.credentials = credentials
        self.authorization = credentials.authorization()
        tls: dict[str, Any] = {}
        if credentials.server.startswith("https://"):
            context = credentials.tls_context()
            tls = {"ssl_context": context, "cert_reqs": context.verify_mode}
            if credentials.server_name:
                tls["server_hostname"] = credentials.server_name
        self.pool = urllib3.PoolManager(maxsize=POOL_SIZE, **tls)

    def prepare(
        self, method: str, path: str, query: dict[str, Any], content_type: str
    ) -> tuple[str, dict[str, str]]:
        url = self.credentials.server + path
        if query:
            url += "?" + urlencode([(key, _text(value)) for key, value in query.items()], quote_via=quote)
        headers = {"Accept": "application/json", "Content-Type": content_type, "User-Agent": USER_AGENT}
        authorization = self.authorization.header()
        if authorization is not None:
            headers["Authorization"] = authorization
        return url, headers


class OfficialConnection(Connection):
    """A configuration only the official client reads (an exec plugin, an auth provider, several files, a
    proxy): its loaders, URLs and pool, as before this module read kubeconfigs itself."""

    def __init__(self, kubeconfig: str | None, why: kubeconfigs.NeedsOfficialClient) -> None:
        try:
            from kubernetes import client as k8s_client
            from kubernetes import config as k8s_config
        except ImportError as error:
            raise kubeconfigs.ConfigError(
                f"{why}: reading that needs the Kubernetes client ({error.name}): pip install 'trainguard[k8s]'"
            ) from None

        configuration = k8s_client.Configuration()
        if kubeconfig is None:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except k8s_config.ConfigException:
                k8s_config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
        configuration.connection_pool_maxsize = POOL_SIZE
        self.api = k8s_client.ApiClient(configuration)
        self.pool = self.api.rest_client.pool_manager

    def prepare(
        self, method: str, path: str, query: dict[str, Any], content_type: str
    ) -> tuple[str, dict[str, str]]:
        _, url, headers, _, _ = self.api.param_serialize(
            method,
            path,
            query_params=list(query.items()),
            header_params={"Accept": "application/json", "Content-Type": content_type},
            auth_settings=["BearerToken"],
        )
        return url, headers

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]


def connect(kubeconfig: str | None) -> Connection:
    """Our own reading of the configuration; the official client's where ours does not cover it.
    ``kubeconfig.ConfigError`` (or the official client's error) for one that cannot be used."""
    try:
        credentials = kubeconfigs.load(kubeconfig)
    except kubeconfigs.NeedsOfficialClient as why:
        log.info("loading the Kubernetes configuration with the kubernetes package: %s", why)
        return OfficialConnection(kubeconfig, why)
    return OwnConnection(credentials)


class Kube:
    """A connection to one API server (kubeconfig file, or the pod's service account when in a cluster)."""

    def __init__(self, kubeconfig: str | None = None) -> None:
        self.connection = connect(kubeconfig)
        #: At most this many requests in flight at once (None: no bound); watches are not counted.
        self._slots: threading.BoundedSemaphore | None = None

    def bounded(self, in_flight: int) -> Kube:
        """This connection with at most ``in_flight`` requests out at once, whichever threads send them (the
        operator's reconciles, its apply pool, its Event sender): the one bound on what it asks of the API server
        at a time, as a Go controller's worker threads are. The connection itself stays shared."""
        limited = copy.copy(self)
        limited._slots = threading.BoundedSemaphore(in_flight)
        return limited

    def unbounded(self) -> Kube:
        """This connection without the bound (for the leader election's renewals, which must never queue
        behind the reconciles' requests)."""
        free = copy.copy(self)
        free._slots = None
        return free

    def close(self) -> None:
        self.connection.close()

    def _send(
        self, method: str, path: str, query: dict[str, Any], body: Any, content_type: str, timeout: Any
    ) -> Any:
        """The raw urllib3 response (not read yet), with the connection's TLS and credentials."""
        url, headers = self.connection.prepare(method, path, query, content_type)
        data = to_json(body) if body is not None else None
        try:
            return self.connection.pool.request(
                method, url, body=data, headers=headers, timeout=timeout, preload_content=False
            )
        except urllib3.exceptions.HTTPError as error:
            raise ApiError(0, f"{method} {path}: {error}") from None

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> Obj:
        data = self._read(method, path, query or {}, body, content_type, timeout)
        return from_json(data) if data else {}

    def _read(
        self, method: str, path: str, query: dict[str, Any], body: Any, content_type: str, timeout: float
    ) -> bytes:
        """The answer's body; ApiError for an HTTP error."""
        if self._slots is None:
            return self._answer(method, path, query, body, content_type, timeout)
        with self._slots:
            return self._answer(method, path, query, body, content_type, timeout)

    def _answer(
        self, method: str, path: str, query: dict[str, Any], body: Any, content_type: str, timeout: float
    ) -> bytes:
        response = self._send(method, path, query, body, content_type, timeout)
        try:
            data = bytes(response.read())
        except urllib3.exceptions.HTTPError as error:  # the answer stopped coming (a read timeout, a reset)
            raise ApiError(0, f"{method} {path}: {error}") from None
        finally:
            response.release_conn()
        if response.status >= 400:
            raise ApiError(response.status, _message(data) or f"{method} {path}: HTTP {response.status}")
        return data

    def get(self, path: str) -> Obj:
        return self.request("GET", path)

    def text(self, path: str, read_timeout: float = 30, **query: Any) -> str:
        """A GET whose answer is text, not JSON (a pod's log)."""
        return self._read("GET", path, query, None, "application/json", read_timeout).decode(errors="replace")

    def list(self, path: str, **query: Any) -> Obj:
        return self.request("GET", path, query=query, timeout=120)

    def list_pages(self, path: str, limit: int, **query: Any) -> Iterator[Obj]:
        """A list in pages of at most ``limit`` objects (``limit`` and ``continue``), each a list answer of its
        own; all of them are of the same version of the collection, which the last one's ``resourceVersion``
        names. A continue token that expired meanwhile is an ApiError 410: list again from the start."""
        token = ""
        while True:
            page = self.list(path, limit=limit, **query, **({"continue": token} if token else {}))
            token = str((page.get("metadata") or {}).get("continue") or "")
            yield page
            if not token:
                return

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("POST", path, body)

    def replace(self, path: str, body: Obj) -> Obj:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Obj) -> Obj:
        return self.request("PATCH", path, body, content_type=MERGE_PATCH)

    def delete(self, path: str, grace: int | None = None, uid: str | None = None) -> Obj:
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        return self.request("DELETE", path, options)

    def watch(
        self, path: str, resource_version: str, query: dict[str, Any], timeout_seconds: int = 60
    ) -> Iterator[Obj]:
        """Watch events ({"type", "object"}) from ``resource_version`` until the server ends the stream."""
        query = {
            **query,
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
        }
        timeout = urllib3.Timeout(connect=10, read=timeout_seconds + 10)
        stream = self._send("GET", path, query, None, "application/json", timeout)
        if stream.status >= 400:
            data = stream.read()
            stream.release_conn()
            raise ApiError(stream.status, _message(data) or f"watch {path}: HTTP {stream.status}")
        try:
            rest = b""
            for chunk in stream.stream(amt=65536, decode_content=True):
                *lines, rest = (rest + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield from_json(line)
        finally:
            stream.release_conn()


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _message(body: Any) -> str:
    try:
        return str(json.loads(body).get("message", ""))
    except (TypeError, ValueError, AttributeError):
        return str(body or "")
