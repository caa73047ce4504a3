"""Fencing, the agent's side (``--lease-url URL --fence-after SECONDS``): the command runs only while the agent
can confirm that its pod is still its slot's current incarnation.

A node cut off from the control plane (its kubelet stopped, or the network split) goes NotReady, and the operator
replaces its pods at once; nothing there may stop the old containers. So the agent renews a lease with the
operator (``POST URL`` with the pod's token, every ``fence_after / RENEWALS_PER_BOUND`` seconds) and ends the
command's whole tree itself (SIGKILL, no grace: a stale incarnation must not write a checkpoint either):

- at once when the answer says the pod is gone: 410 (the operator: deleted, replaced by a newer pod of its
  name, or on a NotReady node), 401 or 403 (the API server refuses the pod's bound token: the pod is deleted);
- when no renewal succeeded for ``fence_after`` seconds, counted from the sending of the last one that did
  (the operator may have answered it at any moment after): an operator it cannot reach may have replaced it.

Anything else is no answer, and decides nothing by itself: a refused connection, a timeout, 404, 429, 5xx
(503: the operator is starting and has not read the cluster yet). So an operator restart or a leader change ends
no healthy job as long as it is back within the bound; the operator's one setting (``--fence-seconds``) makes the
bound generous by default (90 s), and the operator waits that setting before it replaces a pod whose end no
kubelet confirms (``trainguard.policy.fencing``, which derives ``--fence-after`` from it). The command starts
only after a first renewal: a pod that the operator has given up on never starts its workers.

A renewal that got no connection is sent again at once, on a new connection (``next_renewal``): the operator's
Service sends each connection to one of its replicas at random, and a replica on a lost node stays among them,
its connections unanswered, until the node is NotReady.

Only this machine's monotonic clock is read. Standard library only: it runs in users' images from the bundle.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

#: How long a renewal waits for its connection. Short: an address that never answers (a replica on a lost node,
#: still among the Service's endpoints) costs this much, and the next renewal, on a new connection that the
#: Service may send to a live replica, goes out at once. The kernel completes a connection to a live operator
#: however busy its process is, and a SYN lost on the way is resent after 1 s, as a new connection would be.
CONNECT_TIMEOUT = 1.0
#: How long a renewal waits for the operator's answer once connected.
ANSWER_TIMEOUT = 5.0
#: Renewals per bound: a few lost in a row (an operator restarting) end nothing.
RENEWALS_PER_BOUND = 6
#: The answers that say the pod is gone: the operator's 410, the API server's refusal of the bound token.
GONE_STATUSES = frozenset({401, 403, 410})


class Answer(Enum):
    RENEWED = "renewed"
    GONE = "gone"
    #: Nothing that decides: no connection, a timeout, an error that is the operator's (5xx), 404, 429.
    NONE = "none"


@dataclass(frozen=True)
class Reply:
    """What one renewal got: the HTTP status (None: no answer), the answer's words or why none came, and whether
    a connection was made at all."""

    status: int | None
    words: str
    connected: bool


def answer_of(status: int | None) -> Answer:
    """What an HTTP status says about the lease (None: no HTTP answer at all)."""
    if status is not None and 200 <= status < 300:
        return Answer.RENEWED
    if status in GONE_STATUSES:
        return Answer.GONE
    return Answer.NONE


def fenced(now: float, renewed_at: float | None, bound: float, gone: str | None) -> str | None:
    """Why the command must end now (words for the log), or None while it may run. ``renewed_at``: when the last
    renewed request was sent (None: none yet; the command has not started then)."""
    if gone is not None:
        return f"the operator says this pod is gone: {gone}"
    if renewed_at is not None and now - renewed_at >= bound:
        return f"no lease renewal for {now - renewed_at:.0f} s (the bound is {bound:g} s)"
    return None


def next_renewal(sent_at: float, done_at: float, reply: Reply, every: float) -> float:
    """When the renewal after one sent at ``sent_at`` and done at ``done_at`` goes out. Renewed: ``every`` after the
    last was sent. No connection: at once, on a new connection, but never sooner than ``CONNECT_TIMEOUT`` (or a
    third of ``every``, if less) after the last was sent, so that a refusal (an operator restarting) is not asked
    in a loop. Connected with no renewal (a 5xx, a timeout): a third of ``every`` later, so one lost answer costs
    little and a starting operator is not pressed."""
    if answer_of(reply.status) is Answer.RENEWED:
        return sent_at + every
    if not reply.connected:
        return max(done_at, sent_at + min(CONNECT_TIMEOUT, every / 3))
    return done_at + every / 3


def post_lease(url: str, token: str) -> Reply:
    """One renewal: ``POST url`` with the pod's token, on a connection of its own."""
    try:
        parts = urllib.parse.urlsplit(url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = kind(parts.hostname or "", parts.port, timeout=CONNECT_TIMEOUT)
    except ValueError as error:
        return Reply(None, str(error), connected=False)
    try:
        try:
            connection.connect()
        except OSError as error:
            return Reply(None, str(error) or type(error).__name__, connected=False)
        if connection.sock is not None:
            connection.sock.settimeout(ANSWER_TIMEOUT)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request("POST", target, body=b"", headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        body = response.read(4096)
        words = "" if 200 <= response.status < 300 else body.decode(errors="replace").strip()
        return Reply(int(response.status), words, connected=True)
    except (OSError, http.client.HTTPException) as error:
        return Reply(None, str(error) or type(error).__name__, connected=True)
    finally:
        connection.close()


class Lease:
    """Renews in a thread of its own; ``fenced(now)`` is what the agent's loop asks."""

    def __init__(
        self,
        url: str,
        token_file: Path,
        bound: float,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.token_file = token_file
        self.bound = bound
        self.every = bound / RENEWALS_PER_BOUND
        self._say = say
        self._clock = clock
        self._lock = threading.Condition()
        self._renewed_at: float | None = None
        self._gone: str | None = None
        self._closing = False
        self._failing = False
        self._thread = threading.Thread(target=self._renew_forever, name="trainguard-lease", daemon=True)
        self._thread.start()

    def fenced(self, now: float) -> str | None:
        with self._lock:
            return fenced(now, self._renewed_at, self.bound, self._gone)

    @property
    def decided(self) -> bool:
        """Whether a renewal or a gone answer came: the command may start (or must not, ``fenced`` says)."""
        with self._lock:
            return self._renewed_at is not None or self._gone is not None

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._lock.notify_all()

    def _renew_forever(self) -> None:
        while True:
            sent_at = self._clock()
            reply = self._renew()
            answer = answer_of(reply.status)
            with self._lock:
                if answer is Answer.RENEWED:
                    self._renewed_at = max(self._renewed_at or sent_at, sent_at)
                elif answer is Answer.GONE:
                    self._gone = f"{reply.status} {reply.words}".strip()
                self._lock.notify_all()
                if self._gone is not None or self._closing:
                    return
                done_at = self._clock()
                wait = next_renewal(sent_at, done_at, reply, self.every) - done_at
                if wait > 0:
                    self._lock.wait(wait)
                if self._closing:
                    return

    def _renew(self) -> Reply:
        try:
            token = self.token_file.read_text().strip()
        except OSError as error:
            reply = Reply(None, f"cannot read the pod's token: {error}", connected=True)
        else:
            reply = post_lease(self.url, token)
        answer = answer_of(reply.status)
        if answer is Answer.RENEWED:
            if self._failing:
                self._say(f"lease renewed with the operator at {self.url} again")
            self._failing = False
        elif answer is Answer.NONE and not self._failing:
            why = f"{reply.status} {reply.words}".strip() if reply.status is not None else reply.words
            self._say(f"cannot renew the lease with the operator at {self.url} (will try again): {why}")
            self._failing = True
        return reply
