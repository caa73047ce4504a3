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

Only this machine's monotonic clock is read. Standard library only: it runs in users' images from the bundle.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from enum import Enum
from pathlib import Path

_TIMEOUT = 5.0
#: Renewals per bound: a few lost in a row (an operator restarting) end nothing.
RENEWALS_PER_BOUND = 6
#: The answers that say the pod is gone: the operator's 410, the API server's refusal of the bound token.
GONE_STATUSES = frozenset({401, 403, 410})


class Answer(Enum):
    RENEWED = "renewed"
    GONE = "gone"
    #: Nothing that decides: no connection, a timeout, an error that is the operator's (5xx), 404, 429.
    NONE = "none"


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
            status, words = self._post()
            answer = answer_of(status)
            with self._lock:
                if answer is Answer.RENEWED:
                    self._renewed_at = max(self._renewed_at or sent_at, sent_at)
                elif answer is Answer.GONE:
                    self._gone = f"{status} {words}".strip()
                self._lock.notify_all()
                if self._gone is not None or self._closing:
                    return
                # After no answer, sooner (a third of the interval), so that one lost answer costs little.
                wait = self.every if answer is Answer.RENEWED else self.every / 3
                self._lock.wait(wait)
                if self._closing:
                    return

    def _post(self) -> tuple[int | None, str]:
        """The answer's status and its words; (None, why) when none came."""
        try:
            token = self.token_file.read_text().strip()
            request = urllib.request.Request(
                self.url, data=b"", method="POST", headers={"Authorization": f"Bearer {token}"}
            )
            with urllib.request.urlopen(request, timeout=_TIMEOUT) as response:
                response.read()
                status = int(response.status)
        except urllib.error.HTTPError as error:
            words = _body(error)
            self._failed(f"{error.code} {words}")
            return int(error.code), words
        except (OSError, ValueError) as error:
            self._failed(str(error))
            return None, str(error)
        if self._failing:
            self._say(f"lease renewed with the operator at {self.url} again")
        self._failing = False
        return status, ""

    def _failed(self, why: str) -> None:
        if not self._failing:
            self._say(f"cannot renew the lease with the operator at {self.url} (will try again): {why}")
        self._failing = True


def _body(error: urllib.error.HTTPError) -> str:
    try:
        return error.read(4096).decode(errors="replace").strip()
    except OSError:
        return ""
