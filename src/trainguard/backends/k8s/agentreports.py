"""The operator's agent-report endpoint: ``POST /v1/agent-report`` from the agents in the job's pods.

What happens inside a pod (a hang restarted in place, workers restarted by torchrun) changes nothing the API
shows, and the agent has no API access of its own. So each agent POSTs a summary of its pod here
(``trainguard.agent.upstream``), with a service-account token that the kubelet projects into the pod for the
audience ``AUDIENCE``. The operator asks the API server who that is (a TokenReview): a token bound to a pod
names the pod (``authentication.kubernetes.io/pod-name`` and ``pod-uid``), so an agent can only speak for its
own pod, whatever its service account, and no pod gets any right on the API. The summary, checked and
cut to what the controller reads (``trainguard.pod.summary.parse``), goes into the pod's annotation
``trainguard.io/agent-report`` (a patch with the pod's uid as precondition); the pod watch brings it to the
reconcile like any change of the pod. Any replica of the operator may take the POST: the annotation is where
the leader finds it.

Answers: 204 taken; 400 not a summary; 401 no token, or one the API server does not accept for
``AUDIENCE``; 403 a token of no pod of a job; 404 anything else; 413 a body over ``MAX_BODY``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trainguard.backends.k8s import manifests
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.observe import is_ours
from trainguard.pod import summary as summaries

log = logging.getLogger(__name__)

PATH = "/v1/agent-report"
#: The audience of the projected tokens and of the TokenReviews.
AUDIENCE = manifests.REPORT_AUDIENCE
MAX_BODY = 64 * 1024
#: How long the answer of a TokenReview is trusted for the same token.
_REVIEW_TTL = 60.0
_MAX_REVIEWS = 4096
_POD_NAME = "authentication.kubernetes.io/pod-name"
_POD_UID = "authentication.kubernetes.io/pod-uid"


class Rejected(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class AgentReports:
    """Checks a POST and writes the summary to the pod's annotation."""

    def __init__(self, kube: Kube, pods: Cache, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.pods = pods
        self.clock = clock
        self._reviews: dict[str, tuple[float, tuple[str, str, str]]] = {}
        self._lock = threading.Lock()

    def take(self, authorization: str | None, body: bytes) -> str:
        """The pod ("namespace/name") whose summary was taken; raises ``Rejected``."""
        token = _bearer(authorization)
        try:
            data = json.loads(body)
        except ValueError:
            raise Rejected(HTTPStatus.BAD_REQUEST, "the body is not JSON") from None
        summary = summaries.parse(data.get("report") if isinstance(data, dict) else None)
        if summary is None:
            raise Rejected(HTTPStatus.BAD_REQUEST, 'expected {"report": {...}} with the agent\'s summary')
        namespace, name, uid = self._who(token)
        pod = self.pods.get(namespace, name)
        if pod is None or pod["metadata"].get("uid") != uid or not is_ours(pod):
            raise Rejected(HTTPStatus.FORBIDDEN, f"{namespace}/{name} is no pod of a training job")
        value = json.dumps(summary, separators=(",", ":"), sort_keys=True)
        if (pod["metadata"].get("annotations") or {}).get(manifests.ANNOTATION_AGENT_REPORT) == value:
            return f"{namespace}/{name}"
        patch = {"metadata": {"uid": uid, "annotations": {manifests.ANNOTATION_AGENT_REPORT: value}}}
        try:
            self.pods.put(self.kube.patch(f"/api/v1/namespaces/{namespace}/pods/{name}", patch))
        except ApiError as error:
            if error.status in (404, 409):  # gone, or a new pod of the same name meanwhile
                raise Rejected(HTTPStatus.FORBIDDEN, f"{namespace}/{name} is gone") from None
            raise
        return f"{namespace}/{name}"

    def _who(self, token: str) -> tuple[str, str, str]:
        """(namespace, pod, pod uid) the token was issued for, by a TokenReview (cached for a minute)."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        with self._lock:
            cached = self._reviews.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [AUDIENCE]},
        }
        status = self.kube.create("/apis/authentication.k8s.io/v1/tokenreviews", review).get("status") or {}
        user = status.get("user") or {}
        extra = user.get("extra") or {}
        username = str(user.get("username") or "")
        if not status.get("authenticated") or AUDIENCE not in (status.get("audiences") or [AUDIENCE]):
            raise Rejected(HTTPStatus.UNAUTHORIZED, "the token was not accepted for this audience")
        names, uids = extra.get(_POD_NAME) or [], extra.get(_POD_UID) or []
        parts = username.split(":")
        if not names or not uids or len(parts) != 4 or parts[:2] != ["system", "serviceaccount"]:
            raise Rejected(HTTPStatus.FORBIDDEN, "the token is not bound to a pod")
        who = (parts[2], str(names[0]), str(uids[0]))
        with self._lock:
            if len(self._reviews) >= _MAX_REVIEWS:
                self._reviews.clear()
            self._reviews[digest] = (now + _REVIEW_TTL, who)
        return who


def _bearer(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Rejected(HTTPStatus.UNAUTHORIZED, "send the pod's token: Authorization: Bearer <token>")
    return token.strip()


def serve(reports: AgentReports, port: int, address: str) -> tuple[ThreadingHTTPServer, str]:
    """Start serving in a daemon thread; returns the server and its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path != PATH:
                self._answer(HTTPStatus.NOT_FOUND, f"POST {PATH}")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"at most {MAX_BODY} bytes")
                return
            try:
                pod = reports.take(self.headers.get("Authorization"), self.rfile.read(length))
            except Rejected as rejected:
                self._answer(rejected.status, str(rejected))
                return
            except ApiError as error:
                log.warning("agent report not taken: %s", error)
                self._answer(HTTPStatus.SERVICE_UNAVAILABLE, "the API server did not answer; try again")
                return
            log.debug("agent report of %s", pod)
            self._answer(HTTPStatus.NO_CONTENT, "")

        def _answer(self, status: HTTPStatus, message: str) -> None:
            body = json.dumps({"message": message}).encode() if message else b""
            self.send_response(status)
            if body:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="agent-reports", daemon=True).start()
    host = f"[{address}]" if ":" in address else address
    return server, f"http://{host}:{server.server_port}{PATH}"
