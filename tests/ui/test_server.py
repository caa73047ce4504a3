"""The job pages' HTTP side against a real local control plane: what it serves, who may act, its updates as they happen."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlencode, urlsplit

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


#: A job of the create page that runs a moment and succeeds.
SHORT = "python3 -c 'import time; [time.sleep(0.2) for _ in range(5)]; print(\"done\")'"


def _made(**fields: Any) -> dict[str, Any]:
    """The create page's form, as the page sends it (what was typed, as text)."""
    return {
        "dialect": "TrainingJob",
        "name": "made",
        "namespace": "default",
        "framework": "generic",
        "roles": [{"name": "worker", "replicas": "2", "min": "1", "max": "3"}],
        "image": "",
        "command": SHORT,
        "working_dir": "",
        "auto_restart": True,
        "retries": "3",
        "hang_restart": False,
        "hang_timeout": "1800",
        "fault_check": True,
        "live": False,
        **fields,
    }


def _draft(browser: Browser, form: dict[str, Any]) -> dict[str, Any]:
    return dict(browser.json(f"/api/create/draft?{urlencode({'form': json.dumps(form)})}"))


def test_the_create_page_drafts_in_each_dialect_with_validates_words(
    local: LocalRuntime, ui_url: str
) -> None:
    browser = Browser(ui_url)
    about = browser.json("/api/create")
    assert [d["key"] for d in about["dialects"]] == [
        "TrainingJob",
        "AITrainingJob",
        "PyTorchJob",
        "ModelArts",
    ]
    assert (about["form"]["namespace"], about["form"]["retries"]) == ("default", 3)
    kinds = {d["key"]: _draft(browser, _made(dialect=d["key"], roles=[{"name": d["roles"][0], "replicas": "1"}]))
             for d in about["dialects"]}  # fmt: skip
    assert {key: (d["kind"], d["valid"]) for key, d in kinds.items()} == {
        "TrainingJob": ("TrainingJob", True),
        "AITrainingJob": ("AITrainingJob", True),
        "PyTorchJob": ("PyTorchJob", True),
        "ModelArts": ("TrainingJob", True),
    }
    assert "fault-tolerance/job-retry-num: '3'" in kinds["ModelArts"]["yaml"]
    # A retry count out of 1-128: the YAML shown, and what trainguard validate says of it, line for line.
    for retries in ("0", "129"):
        bad = _draft(browser, _made(retries=retries))
        assert not bad["valid"]
        path = local.workdir / bad["file"]
        path.write_text(bad["yaml"])
        validated = local.cli("validate", str(path))
        assert validated.code == 2
        said = validated.err.removeprefix("error:").strip().replace(f"{local.workdir}/", "")
        assert bad["problems"] == said.splitlines()
        assert bad["problems"] == [
            f"made.yaml:9: spec.jobRetry.retryNum: retryNum {retries} must be "
            + ("at least 1" if retries == "0" else "at most 128")
        ]
    assert browser.request("GET", "/api/create/draft?form=nope")[0] == 400


def test_the_create_page_submits_a_valid_job_only_and_with_the_token(
    local: LocalRuntime, ui_url: str
) -> None:
    reader = Browser(ui_url)
    assert reader.request("POST", "/api/create", {"form": _made()})[0] == 403  # read-only
    browser, token = _signed_in(ui_url)
    act = {"X-Trainguard-Token": token}
    status, _, body = browser.request("POST", "/api/create", {"form": _made(retries="129")}, act)
    assert status == 400
    assert "retryNum 129 must be at most 128" in json.loads(body)["error"]
    assert browser.json("/api/jobs") == []  # nothing submitted
    status, _, body = browser.request("POST", "/api/create", {"form": _made()}, act)
    assert status == 200, body
    assert json.loads(body) == {"name": "made", "message": "job made submitted"}
    assert [row["name"] for row in browser.json("/api/jobs")] == ["made"]
    done = local.wait_phase("made", "Succeeded", timeout=60)
    assert [pod["name"] for pod in done["status"]["pods"]] == ["made-worker-0", "made-worker-1"]
    # The job submitted is the one validated, as trainguard run would have submitted it.
    spec = local.view("made")["spec"]
    assert (spec["jobRetry"]["retryNum"], spec["faultCheck"]["enabled"]) == (3, True)
    status, _, body = browser.request("POST", "/api/create", {"form": _made()}, act)
    assert status == 400
    assert "exists already" in json.loads(body)["error"]
