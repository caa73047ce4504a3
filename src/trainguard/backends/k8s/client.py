"""The one place that talks to the Kubernetes API: plain JSON over kept-alive HTTP/1.1 connections
(``trainguard.backends.k8s.transport``).

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

import contextlib
import copy
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from pydantic_core import from_json, to_json

from trainguard._version import __version__
from trainguard.backends.k8s import kubeconfig as kubeconfigs
from trainguard.backends.k8s.transport import Answer, Pool, Timeouts, TransportError

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


class Connection(Protocol):
    """Where requests go, with which credentials, over which connections (``OwnConnection``,
    ``OfficialConnection``)."""

    def send(
        self,
        method: str,
        path: str,
        query: dict[str, Any],
        body: bytes | None,
        content_type: str,
        timeouts: Timeouts,
    ) -> Answer:
        """The answer's status, its body not read yet; TransportError where none came."""
        ...

    def close(self) -> None: ...


class OwnConnection:
    """Credentials that ``kubeconfig`` read, over kept-alive connections whose TLS settings are loaded once
    (``trainguard.backends.k8s.transport``)."""

    def __init__(self, credentials: kubeconfigs.Credentials) -> None:
        self.credentials = credentials
        self.authorization = credentials.authorization()
        https = credentials.server.startswith("https://")
        context = credentials.tls_context() if https else None
        self.pool = Pool(credentials.server, context, credentials.server_name, POOL_SIZE)

    def headers(self, content_type: str) -> dict[str, str]:
        headers = {"Accept": "application/json", "Content-Type": content_type, "User-Agent": USER_AGENT}
        authorization = self.authorization.header()
        if authorization is not None:
            headers["Authorization"] = authorization
        return headers

    def send(
        self,
        method: str,
        path: str,
        query: dict[str, Any],
        body: bytes | None,
        content_type: str,
        timeouts: Timeouts,
    ) -> Answer:
        return self.pool.request(method, path + _query(query), self.headers(content_type), body, timeouts)

    def close(self) -> None:
        self.pool.close()


class OfficialConnection:
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

    def send(
        self,
        method: str,
        path: str,
        query: dict[str, Any],
        body: bytes | None,
        content_type: str,
        timeouts: Timeouts,
    ) -> Answer:
        import urllib3

        _, url, headers, _, _ = self.api.param_serialize(
            method,
            path,
            query_params=list(query.items()),
            header_params={"Accept": "application/json", "Content-Type": content_type},
            auth_settings=["BearerToken"],
        )
        timeout = urllib3.Timeout(connect=timeouts.connect, read=timeouts.read)
        try:
            response = self.pool.request(
                method, url, body=body, headers=headers, timeout=timeout, preload_content=False
            )
        except urllib3.exceptions.HTTPError as error:
            raise TransportError(str(error)) from None
        return _Urllib3Answer(response)

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


class Activity:
    """The requests in flight through one connection (and every copy of its ``Kube``; watches are not counted),
    so that a sender of what can wait (Events) can let the rest go first (``wait_quiet``)."""

    def __init__(self) -> None:
        self._quiet = threading.Condition()
        self._in_flight = 0

    def __enter__(self) -> None:
        with self._quiet:
            self._in_flight += 1

    def __exit__(self, *_: object) -> None:
        with self._quiet:
            self._in_flight -= 1
            if not self._in_flight:
                self._quiet.notify_all()

    def wait_quiet(self, seconds: float) -> bool:
        """Waits until no request is in flight, at most ``seconds``; whether it is quiet."""
        with self._quiet:
            return self._quiet.wait_for(lambda: not self._in_flight, max(seconds, 0.0))


class Kube:
    """A connection to one API server (kubeconfig file, or the pod's service account when in a cluster)."""

    def __init__(self, kubeconfig: str | None = None) -> None:
        self.connection = connect(kubeconfig)
        #: At most this many requests in flight at once (None: no bound); watches are not counted.
        self._slots: threading.BoundedSemaphore | None = None
        #: Every request in flight, whatever the bound (shared by the copies ``bounded`` and ``unbounded`` make).
        self.activity = Activity()

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
        with self._slots or contextlib.nullcontext(), self.activity:
            return self._answer(method, path, query, body, content_type, timeout)

    def _answer(
        self, method: str, path: str, query: dict[str, Any], body: Any, content_type: str, timeout: float
    ) -> bytes:
        data = to_json(body) if body is not None else None
        try:
            answer = self.connection.send(method, path, query, data, content_type, Timeouts(timeout, timeout))
            try:
                text = answer.read()
            finally:
                answer.close()
        except TransportError as error:  # no answer, or it stopped coming (a read timeout, a reset)
            raise ApiError(0, f"{method} {path}: {error}") from None
        if answer.status >= 400:
            raise ApiError(answer.status, _message(text) or f"{method} {path}: HTTP {answer.status}")
        return text

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
        timeouts = Timeouts(connect=10, read=timeout_seconds + 10)
        try:
            stream = self.connection.send("GET", path, query, None, "application/json", timeouts)
        except TransportError as error:
            raise ApiError(0, f"watch {path}: {error}") from None
        try:
            if stream.status >= 400:
                data = stream.read()
                raise ApiError(stream.status, _message(data) or f"watch {path}: HTTP {stream.status}")
            rest = b""
            for chunk in stream.chunks():
                *lines, rest = (rest + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield from_json(line)
        except TransportError as error:
            raise ApiError(0, f"watch {path}: {error}") from None
        finally:
            stream.close()


class _Urllib3Answer:
    """urllib3's response to a request the official client's pool sent, read as ``transport.Answer`` says."""

    def __init__(self, response: Any) -> None:
        self.status = int(response.status)
        self._response = response

    def read(self) -> bytes:
        return b"".join(self.chunks())

    def chunks(self) -> Iterator[bytes]:
        import urllib3

        try:
            yield from self._response.stream(amt=65536, decode_content=True)
        except urllib3.exceptions.HTTPError as error:
            raise TransportError(str(error)) from None

    def close(self) -> None:
        self._response.release_conn()


def _query(query: dict[str, Any]) -> str:
    if not query:
        return ""
    return "?" + urlencode([(key, _text(value)) for key, value in query.items()], quote_via=quote)


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _message(body: Any) -> str:
    try:
        return str(json.loads(body).get("message", ""))
    except (TypeError, ValueError, AttributeError):
        return str(body or "")
