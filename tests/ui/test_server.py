"""The job pages' HTTP side against a real local control plane: what it serves, who may act, its updates as they happen."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.integration.local.harness import LocalRuntime

pytestmark = pytest.mark.integration


class Browser:
    """Requests as a browser sends them: one host, the cookies it was given."""

    def __init__(self, url: str) -> None:
        split = urlsplit(url)
        self.host, self.port = split.hostname or "", split.port or 80
        self.cookie = ""

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                host: str | None = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        sent = {"Host": host or f"{self.host}:{self.port}", **(headers or {})}
        if self.cookie:
            sent["Cookie"] = self.cookie
        data = json.dumps(body).encode() if body is not None else None
        if data is not None:
            sent["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=sent)
        answer = conn.getresponse()
        got = answer.read()
        found = dict(answer.getheaders())
        if "Set-Cookie" in found:
            self.cookie = found["Set-Cookie"].split(";")[0]
        conn.close()
        return answer.status, found, got

    def json(self, path: str) -> Any:
        status, _, body = self.request("GET", path)
        assert status == 200, body
        return json.loads(body)


def _signed_in(secret_url: str) -> tuple[Browser, str]:
    browser = Browser(secret_url)
    split = urlsplit(secret_url)
    status, headers, _ = browser.request("GET", f"/?{split.query}")
    assert (status, headers["Location"]) == (303, "/")  # the secret leaves the address bar
    assert "HttpOnly" in headers["Set-Cookie"]
    assert "SameSite=Strict" in headers["Set-Cookie"]
    session = browser.json("/api/session")
    assert session["actions"] is True
    return browser, session["token"]


def test_the_pages_and_their_data(local: LocalRuntime, job: str, secret_url: str) -> None:
    browser = Browser(secret_url)
    status, headers, body = browser.request("GET", "/")
    assert status == 200
    assert b'src="/static/app.js"' in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]  # nothing inline, nothing from elsewhere
    for asset in ("app.js", "timeline.js", "style.css"):
        assert browser.request("GET", f"/static/{asset}")[0] == 200
    assert browser.request("GET", "/static/../server.py")[0] == 404
    [row] = browser.json("/api/jobs")
    assert (row["name"], row["phase"], row["roles"]) == (
        "pages", "Running", [{"name": "worker", "ready": 2, "desired": 2, "min": 1, "max": 3}])  # fmt: skip
    detail = browser.json(f"/api/jobs/{job}")["job"]
    assert [pod["name"] for pod in detail["pods"]] == ["pages-worker-0", "pages-worker-1"]
    assert [lane["pod"] for lane in detail["timeline"]["lanes"]] == ["pages-worker-0", "pages-worker-1"]
    lines = local.wait(
        job, lambda _: len(browser.json(f"/api/jobs/{job}/logs?pod=pages-worker-0&lines=3")["lines"]) == 3
    )
    assert lines
    answer = browser.json(f"/api/jobs/{job}/whatif?pod=pages-worker-1&fault=137")
    assert (answer["action"], answer["rule_text"]) == ("restart", "restartPolicy (OnFailure)")
    assert browser.request("GET", "/api/jobs/nothing")[0] == 404


def test_without_the_secret_the_pages_are_read_only(local: LocalRuntime, job: str, secret_url: str) -> None:
    reader = Browser(secret_url)
    assert reader.json("/api/session") == {"backend": "local", "actions": False, "token": None,
                                           "chaos": ["kill", "hang", "evict", "force-delete", "node-down", "node-up"]}  # fmt: skip
    status, _, body = reader.request("POST", f"/api/jobs/{job}/scale", {"role": "worker", "replicas": 3})
    assert status == 403
    assert "read-only" in json.loads(body)["error"]
    # A cookie alone (what a cross-site form would carry, were it sent) is not enough: the token is needed too.
    browser, _token = _signed_in(secret_url)
    assert browser.request("POST", f"/api/jobs/{job}/scale", {"role": "worker", "replicas": 3})[0] == 403
    assert browser.request("POST", f"/api/jobs/{job}/scale", {"role": "worker", "replicas": 3},
                           {"X-Trainguard-Token": "guess"})[0] == 403  # fmt: skip
    # Nor a wrong secret, nor another host's name (DNS rebinding).
    wrong = Browser(secret_url)
    assert "Set-Cookie" not in wrong.request("GET", "/?token=guess")[1]
    assert wrong.request("GET", "/api/jobs", host="evil.example:80")[0] == 421
    assert local.view(job)["status"]["desired"]["worker"] == 2  # nothing changed


def test_actions_scale_within_bounds_with_the_clis_words(
    local: LocalRuntime, job: str, secret_url: str
) -> None:
    browser, token = _signed_in(secret_url)
    status, _, body = browser.request("POST", f"/api/jobs/{job}/scale", {"role": "worker", "replicas": 4},
                                      {"X-Trainguard-Token": token})  # fmt: skip
    cli = local.cli("scale", job, "--role", "worker", "--replicas", "4")
    assert status == 400
    assert json.loads(body)["error"] in cli.err
    status, _, body = browser.request("POST", f"/api/jobs/{job}/scale", {"role": "worker", "replicas": 3},
                                      {"X-Trainguard-Token": token})  # fmt: skip
    assert status == 200, body
    local.wait_running(job, 3)


def test_a_chaos_kill_reaches_an_open_stream_within_two_seconds(
    local: LocalRuntime, job: str, secret_url: str
) -> None:
    browser, token = _signed_in(secret_url)
    conn = http.client.HTTPConnection(browser.host, browser.port, timeout=10)
    conn.request("GET", f"/api/stream?job={job}", headers={"Host": f"{browser.host}:{browser.port}"})
    stream = conn.getresponse()
    assert stream.getheader("Content-Type") == "text/event-stream"

    def next_job() -> dict[str, Any]:
        while True:
            line = stream.readline().decode()
            if line.startswith("data: "):
                return dict(json.loads(line.removeprefix("data: "))["job"])

    assert not next_job()["history"]
    status, _, body = browser.request("POST", "/api/chaos", {"action": "kill", "target": "pages-worker-1"},
                                      {"X-Trainguard-Token": token})  # fmt: skip
    assert status == 200, body
    killed = time.monotonic()
    while True:
        seen = next_job()
        faults = [h for h in seen["history"] if h["kind"] == "fault"]
        if faults:
            break
    assert time.monotonic() - killed < 2.0
    assert (faults[0]["pod"], faults[0]["fault"]) == ("pages-worker-1", "Exited")
    assert any(mark["pod"] == "pages-worker-1" for mark in seen["timeline"]["faults"])
    conn.close()
