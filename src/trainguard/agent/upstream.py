"""The agent's word to the operator (``--report-url URL --report-token FILE``): what happened inside its pod.

On Kubernetes nothing but the agent sees a hang restarted in place or workers restarted by torchrun: the pod
goes on, so neither the kubelet nor the operator notices. The agent folds its events into a summary of its
pod (``trainguard.pod.summary``, the one fold every runtime reads) and POSTs the part the operator keeps
(``attempt``, ``hangs``, ``inPlaceRestarts``, ``workerRestarts``, ``workerRestartsFrom``, ``liveRounds``,
``liveRoundsFrom``, ``liveUnused``) after every change of it to ``URL`` (the operator's agent-report
endpoint), with the token in ``FILE`` (a service-account token the kubelet projects for the operator's
audience, read again for every POST since the kubelet renews it). The operator checks the token, which
names the pod, and keeps the summary in the pod's annotation ``trainguard.io/agent-report``, where the
controller reads it.

The summary only grows, so a POST that is lost is made good by the next one. Sending runs in a thread of its
own and never blocks the supervision; a failed POST is tried again (1 s, doubling up to 30 s), and a line on
stderr says so once until one succeeds again.

Standard library only: it runs in users' images from the bundle.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainguard.pod import summary as summaries

_TIMEOUT = 5.0
_RETRY_FIRST, _RETRY_MAX = 1.0, 30.0


class Upstream:
    def __init__(self, url: str, token_file: Path, say: Callable[[str], None]) -> None:
        self.url = url
        self.token_file = token_file
        self._say = say
        self._summary = summaries.new()
        self._version = 0
        self._sent = 0
        self._changed = threading.Condition()
        self._closing = False
        self._failing = False
        self._thread = threading.Thread(target=self._send_forever, name="trainguard-upstream", daemon=True)
        self._thread.start()

    def update(self, record: dict[str, Any]) -> None:
        with self._changed:
            if summaries.fold(self._summary, record):
                self._version += 1
                self._changed.notify_all()

    def close(self, wait: float = 2.0) -> None:
        """Give the last summary ``wait`` seconds to go out, then stop."""
        deadline = time.monotonic() + wait
        with self._changed:
            while self._sent < self._version and time.monotonic() < deadline:
                self._changed.wait(max(deadline - time.monotonic(), 0.0))
            self._closing = True
            self._changed.notify_all()

    def _send_forever(self) -> None:
        delay = _RETRY_FIRST
        while True:
            with self._changed:
                while self._sent >= self._version and not self._closing:
                    self._changed.wait()
                if self._closing:
                    return
                version, body = self._version, json.dumps({"report": summaries.wire(self._summary)}).encode()
            if self._post(body):
                delay = _RETRY_FIRST
                with self._changed:
                    self._sent = max(self._sent, version)
                    self._changed.notify_all()
                continue
            with self._changed:
                self._changed.wait(delay)  # a close or a newer summary does not make the operator come back
                delay = min(delay * 2, _RETRY_MAX)

    def _post(self, body: bytes) -> bool:
        try:
            token = self.token_file.read_text().strip()
            request = urllib.request.Request(
                self.url,
                data=body,
                method="POST",
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
            )
            with urllib.request.urlopen(request, timeout=_TIMEOUT) as response:
                response.read()
        except (OSError, urllib.error.URLError, ValueError) as error:
            if not self._failing:
                self._say(f"cannot report to the operator at {self.url} (will try again): {error}")
            self._failing = True
            return False
        if self._failing:
            self._say(f"reporting to the operator at {self.url} again")
        self._failing = False
        return True
