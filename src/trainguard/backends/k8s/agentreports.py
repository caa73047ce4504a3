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

``POST /v1/agent-lease`` (``LEASE_PATH``, no body): an agent renews its lease (fencing, ``trainguard.policy.fencing``;
the agent's side is ``trainguard.agent.lease``). The answer says whether the pod that holds the token is still its
slot's current incarnation, and only a definite answer says so either way:

- 200: renewed. The pod exists with the token's uid, and its node is not known to be NotReady.
- 410: gone. The pod's node is NotReady (the operator removes such pods at once and replaces them). The agent
  ends its workers at once.
- 401: the API server refuses the token: a token bound to a pod is refused once the pod is deleted (a newer pod
  of the same name has another uid). When the operator's cache and the token disagree (the pod missing from it,
  or another uid there), the token is reviewed again, not taken from the review cache: 401 if the API server
  refuses it now.
- 503: the operator cannot tell now (its caches not synced yet after a start, a pod its cache has not caught up
  with, the API server not answering). Like no answer at all, this renews nothing and ends nothing: the agent's
  bound runs on.

So an operator that restarts, or a leader that changes, answers 503 or nothing, never 410, until it has read the
pods and nodes: it ends no healthy job's workers. Any replica answers from its own caches; the margin between
the agent's bound and the operator's wait covers how much later one replica sees a node NotReady than another.
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
from trainguard.backends.k8s.metadata import Obj
from trainguard.backends.k8s.observe import is_ours, node_ready
from trainguard.pod import summary as summaries

log = logging.getLogger(__name__)

PATH = "/v1/agent-report"
LEASE_PATH = manifests.LEASE_PATH
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

    def __init__(
        self,
        kube: Kube,
        pods: Cache,
        clock: Callable[[], float] = time.monotonic,
        nodes: Cache | None = None,
    ) -> None:
        self.kube = kube
        self.pods = pods
        self.nodes = nodes
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

    def renew(self, authorization: str | None) -> str:
        """The pod ("namespace/name") whose lease is renewed; raises ``Rejected`` (410: it is gone)."""
        token = _bearer(authorization)
        if not self.pods.synced.is_set() or (self.nodes is not None and not self.nodes.synced.is_set()):
            raise Rejected(HTTPStatus.SERVICE_UNAVAILABLE, "the operator is reading the cluster; try again")
        namespace, name, uid = self._who(token)
        pod = self.pods.get(namespace, name)
        if pod is None or pod["metadata"].get("uid") != uid:
            # The cache and the token disagree: the pod is gone, or the cache is behind (a pod just created, or
            # the previous pod of its name not yet gone from it). The API server tells, not the cached review.
            self._who(token, fresh=True)  # 401 when it refuses the token: the pod is deleted
            raise Rejected(
                HTTPStatus.SERVICE_UNAVAILABLE, "the operator has not seen this pod yet; try again"
            )
        node_name = (pod.get("spec") or {}).get("nodeName")
        node = self.nodes.get("", node_name) if self.nodes is not None and node_name else None
        why = gone(pod, None if node is None else node_ready(node))
        if why is not None:
            raise Rejected(HTTPStatus.GONE, f"{namespace}/{name} {why}")
        return f"{namespace}/{name}"

    def _who(self, token: str, *, fresh: bool = False) -> tuple[str, str, str]:
        """(namespace, pod, pod uid) the token was issued for, by a TokenReview (cached for a minute, unless
        ``fresh``). The API server accepts a token bound to a pod only while that pod exists."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        with self._lock:
            cached = self._reviews.get(digest)
        if cached is not None and cached[0] > now and not fresh:
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


def gone(pod: Obj, node_ready: bool | None) -> str | None:
    """Why the incarnation ``pod`` (as the operator's cache has it, with the token's uid) is no longer its slot's
    current one (words for its agent's log), or None while it is; ``node_ready``: its node's readiness (None:
    unknown, which is not NotReady). A graceful deletion is not gone: the kubelet ends the pod, and the agent
    stops the command with its grace period."""
    if not is_ours(pod):
        return "is no pod of a training job"
    if node_ready is False:
        return f"is on node {pod['spec'].get('nodeName')}, which is not Ready: the operator replaces it"
    return None


def _bearer(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Rejected(HTTPStatus.UNAUTHORIZED, "send the pod's token: Authorization: Bearer <token>")
    return token.strip()


class _Server(ThreadingHTTPServer):
    #: Connections waiting to be accepted (socketserver's default is 5): every job pod's agent renews its lease
    #: here, and a SYN dropped from a full queue costs a renewal its connect timeout (``trainguard.agent.lease``).
    request_queue_size = 1024


def serve(reports: AgentReports, port: int, address: str) -> tuple[ThreadingHTTPServer, str]:
    """Start serving in a daemon thread; returns the server and its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path == LEASE_PATH:
                self._serve(
                    lambda _: reports.renew(self.headers.get("Authorization")),
                    "agent lease",
                    "renewed",
                    HTTPStatus.OK,
                    "renewed",
                )
            elif self.path == PATH:
                self._serve(
                    lambda body: reports.take(self.headers.get("Authorization"), body),
                    "agent report",
                    "taken",
                    HTTPStatus.NO_CONTENT,
                    "",
                )
            else:
                self._answer(HTTPStatus.NOT_FOUND, f"POST {PATH}")

        def _serve(
            self, handle: Callable[[bytes], str], what: str, done: str, status: HTTPStatus, message: str
        ) -> None:
            """Reads the body (at most ``MAX_BODY``), hands it to ``handle`` and answers ``status`` when it took
            it, the rejection's status, or 503 when the API server did not answer."""
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"at most {MAX_BODY} bytes")
                return
            body = self.rfile.read(length)
            try:
                pod = handle(body)
            except Rejected as rejected:
                self._answer(rejected.status, str(rejected))
                return
            except ApiError as error:
                log.warning("%s not %s: %s", what, done, error)
                self._answer(HTTPStatus.SERVICE_UNAVAILABLE, "the API server did not answer; try again")
                return
            log.debug("%s of %s %s", what, pod, done)
            self._answer(status, message)

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

    server = _Server((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="agent-reports", daemon=True).start()
    host = f"[{address}]" if ":" in address else address
    return server, f"http://{host}:{server.server_port}{PATH}"
