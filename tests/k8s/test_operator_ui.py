"""The job pages served by the operator (``--ui-port``), reading the job resources it reconciles: the same
page as the local control plane's, in a real browser (Debian's Chromium, Playwright), against CCE's job on the
test cluster (a real kube-apiserver, kwok's nodes)."""

from __future__ import annotations

import json
import shutil
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import Scenario, scenario
from tests.k8s.test_operator_cce_job import AITJ, JOB, TRAINERS, _started

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
KEY = f"default/{JOB}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def pages(kube_cluster: KubeCluster, tmp_path: Path) -> Iterator[tuple[Scenario, str]]:
    secret = tmp_path / "ui-token"
    secret.write_text("a-secret-of-this-test\n")
    with scenario(kube_cluster, tmp_path, namespace="default") as s:
        port = _free_port()
        s.operator.stop()
        s.operator.extra_args = ["--ui-port", str(port), "--ui-token-file", str(secret)]
        s.operator.start()
        _started(s)
        yield s, f"http://127.0.0.1:{port}/"


def _get(url: str) -> Any:
    return json.loads(urllib.request.urlopen(url, timeout=10).read())


def test_the_operators_pages_read_its_jobs(pages: tuple[Scenario, str]) -> None:
    s, url = pages
    [row] = s.wait("the job in the pages", lambda: _get(url + "api/jobs"), 30)
    assert (row["name"], row["job"], row["kind"], row["phase"]) == (KEY, JOB, "AITrainingJob", "Running")
    assert {r["name"]: (r["ready"], r["min"], r["max"]) for r in row["roles"]} == {
        "launcher": (1, 1, 1),
        "trainer": (3, 1, 5),
    }
    job_url = url + f"api/jobs/{KEY.replace('/', '%2F')}"
    detail = _get(job_url)["job"]
    assert [p["name"] for p in detail["pods"]][1:] == TRAINERS
    # The operator writes the job's status before it sends the events of that change: the Running event may
    # come a moment after the phase (and the page keeps a job's events 5 s).
    s.wait(
        "the Running event on the page",
        lambda: any(e["reason"] == "TrainingJobRunning" for e in _get(job_url)["job"]["events"]),
        30,
    )
    whatif = _get(job_url + f"/whatif?pod={TRAINERS[0]}&fault=NodeNotReady")
    assert whatif["action"] == "restart"
    assert _get(url + "api/session") == {
        "backend": "kubernetes",
        "actions": False,
        "token": None,
        "chaos": [],
    }


@pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (scripts/test does)"
)
def test_a_force_deleted_pods_replacement_and_a_scale_on_the_operators_page(
    pages: tuple[Scenario, str], tmp_path: Path
) -> None:
    playwright_api = pytest.importorskip("playwright.sync_api")
    expect = playwright_api.expect
    s, url = pages
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(url + "?token=a-secret-of-this-test")
        expect(page.locator("#access")).to_have_text("kubernetes · actions allowed")
        page.locator("a.job-link", has_text=KEY).click()
        expect(page.locator("#pods tbody tr")).to_have_count(4)

        s.force_delete(TRAINERS[1])
        history = page.locator("#history tbody tr").first
        expect(history).to_contain_text(TRAINERS[1], timeout=30000)
        expect(history).to_contain_text("PodForceDeleted")
        row = page.locator("#pods tbody tr", has_text=TRAINERS[1])
        expect(row).to_contain_text("Running", timeout=30000)
        expect(row.locator("td").nth(5)).to_have_text("1")  # restarts: its replacement

        form = page.locator("form.scale[data-role=trainer]")
        form.locator("input").fill("9")
        form.locator("button").click()
        expect(page.locator("#notice")).to_contain_text("replicas 9 outside [1, 5]")
        form.locator("input").fill("4")
        form.locator("button").click()
        expect(page.locator("#notice")).to_have_text(f"{KEY}: trainer scaled to 4")
        expect(page.locator("#pods tbody tr")).to_have_count(5, timeout=30000)
        assert s.job(AITJ, JOB)["spec"]["replicaSpecs"]["trainer"]["replicas"] == 4
        page.screenshot(path=str(tmp_path / "operator-job-page.png"), full_page=True)
        browser.close()
    assert not errors, errors
