"""The one place that talks to the Kubernetes API: plain JSON over the official client's connection.

Objects are plain dicts (what ``kubectl get -o json`` shows), for pods, nodes and custom resources alike: the
operator reads a handful of fields, and typed models would cost a conversion per watch event at scale.
Errors come back as ``ApiError`` with the HTTP status, so callers can tell a conflict (409) or a missing
object (404) from a failure.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Kube:
    """A connection to one API server (kubeconfig file, or the pod's service account when in a cluster)."""

    def __init__(self, kubeconfig: str | None = None) -> None:
        configuration = k8s_client.Configuration()
        if kubeconfig is None:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except k8s_config.ConfigException:
                k8s_config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
        # Reconcile workers, the apply pool and the watches each hold a connection: a pool smaller than that
        # opens (and throws away) a TLS connection per request under load.
        configuration.connection_pool_maxsize = 64
        self.api = k8s_client.ApiClient(configuration)
        #: At most this many requests in flight at once (None: no bound); watches are not counted.
        self._slots: threading.BoundedSemaphore | None = None
        self.in_flight: int | None = None

    def bounded(self, in_flight: int) -> Kube:
        """This connection with at most ``in_flight`` requests out at once, whichever threads send them (the
        operator's reconciles, its apply pool, its event sender): the one bound on what it asks of the API server
        at a time, as a Go controller's worker threads are. The connection itself stays shared."""
        limited = copy.copy(self)
        limited._slots = threading.BoundedSemaphore(in_flight)
        limited.in_flight = in_flight
        return limited

    def unbounded(self) -> Kube:
        """This connection without the bound (for the leader election's renewals, which must never queue
        behind the reconciles' requests)."""
        free = copy.copy(self)
        free._slots = None
        free.in_flight = None
        return free

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    def _send(
        self, method: str, path: str, query: dict[str, Any], body: Any, content_type: str, timeout: Any
    ) -> Any:
        """The raw urllib3 response (not read yet), with the connection's TLS and credentials."""
        _, url, headers, _, _ = self.api.param_serialize(
            method,
            path,
            query_params=list(query.items()),
            header_params={"Accept": "application/json", "Content-Type": content_type},
            auth_settings=["BearerToken"],
        )
        data = json.dumps(body).encode() if body is not None else None
        try:
            return self.api.rest_client.pool_manager.request(
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
        return json.loads(data) if data else {}

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
                        yield json.loads(line)
        finally:
            stream.release_conn()


def _message(body: Any) -> str:
    try:
        return str(json.loads(body).get("message", ""))
    except (TypeError, ValueError, AttributeError):
        return str(body or "")
