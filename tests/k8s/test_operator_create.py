"""The create page served by the operator (``--ui-port``) on the test cluster (a real kube-apiserver, kwok's
nodes): a job made on it is created as the resource of the dialect chosen, as the page showed it, and the
operator reconciles it like any job applied with kubectl; an invalid one, or one the operator would not see,
is created nowhere."""

from __future__ import annotations

import json
import shutil
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import Scenario, pod_names
from trainguard.api.crd import pytorchjob_crd

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SECRET = "a-secret-of-this-test"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def pages(kube_cluster: KubeCluster, tmp_path: Path) -> Iterator[tuple[Scenario, str]]:
    """An operator serving TrainingJobs, AITrainingJobs and PyTorchJobs in a namespace of its own, with its pages."""
    kube_cluster.kubectl("apply", "-f", "-", input=json.dumps(pytorchjob_crd()))
    kube_cluster.wait_established("pytorchjobs.kubeflow.org")
    secret = tmp_path / "ui-token"
    secret.write_text(SECRET + "\n")
    port = _free_port()
    s = Scenario(kube_cluster, tmp_path, nodes=6)  # one pod per node: 2 trainers, 2 workers, a store
    s.operator.extra_args = ["--pytorchjobs", "--ui-port", str(port), "--ui-token-file", str(secret)]
    s.set_up()
    url = f"http://127.0.0.1:{port}/"
    try:
        s.wait("the operator's pages served", lambda: _serving(url), 30)
        yield s, url
    finally:
        s.kubectl("delete", "pytorchjobs", "--all", "--wait=false")
        s.tear_down()


def _serving(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "api/session", timeout=5).read()
    except OSError:
        return False
    return True


class Session:
    """A browser's session on the pages: the cookie the secret opens, and its token for the actions."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        self.opener.open(f"{url}?token={SECRET}", timeout=10).read()
        self.token = self.get("api/session")["token"]

    def get(self, path: str) -> Any:
        return json.loads(self.opener.open(self.url + path, timeout=10).read())

    def create(self, form: dict[str, Any]) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.url + "api/create",
            data=json.dumps({"form": form}).encode(),
            headers={"Content-Type": "application/json", "X-Trainguard-Token": self.token},
            method="POST",
        )
        try:
            with self.opener.open(request, timeout=30) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())


def _form(namespace: str, **fields: Any) -> dict[str, Any]:
    return {
        "dialect": "AITrainingJob",
        "name": "made",
        "namespace": namespace,
        "roles": [{"name": "trainer", "replicas": "2", "min": "1", "max": "3"}],
        "image": "registry.example/train:1",
        "command": "python train.py --epochs 3",
        "auto_restart": True,
        "retries": "3",
        "hang_restart": True,
        "hang_timeout": "600",
        "fault_check": False,
        **fields,
    }


def _running(s: Scenario, names: list[str]) -> bool:
    return set(names) <= set(pod_names(s.pods()))


def test_jobs_made_on_the_operators_create_page_are_the_dialects_resources_and_reconciled(
    pages: tuple[Scenario, str],
) -> None:
    s, url = pages
    session = Session(url)
    assert session.get("api/create")["form"]["namespace"] == s.namespace  # where this operator looks

    # Invalid (a retry count out of 1-128), or where this operator does not look: nothing is created.
    status, answer = session.create(_form(s.namespace, retries="129"))
    assert status == 400
    assert "spec.jobRetry.retryNum: retryNum 129 must be at most 128" in answer["error"]
    status, answer = session.create(_form("elsewhere"))
    assert (status, answer["error"]) == (
        400,
        f"metadata.namespace 'elsewhere': this operator watches namespace '{s.namespace}' only; create the job there",
    )
    assert json.loads(s.kubectl("get", "aitrainingjobs", "-o", "json"))["items"] == []

    # CCE's AITrainingJob, as the page wrote it.
    status, answer = session.create(_form(s.namespace))
    assert (status, answer) == (
        200,
        {"name": f"{s.namespace}/made", "message": f"AITrainingJob {s.namespace}/made created"},
    )
    job = s.job("aitrainingjob", "made")
    assert job["apiVersion"] == "kongming.cce.baiudbce.com/v1"
    trainer = job["spec"]["replicaSpecs"]["trainer"]
    assert (trainer["replicaType"], trainer["replicas"], trainer["minReplicas"], trainer["maxReplicas"]) == (
        "worker", 2, 1, 3)  # fmt: skip
    assert (job["spec"]["faultTolerant"], job["spec"]["jobRetry"], job["spec"]["hang"]) == (
        True, {"retryNum": 3}, {"enabled": True, "timeoutSeconds": 600})  # fmt: skip
    s.wait("its 2 trainers running", lambda: _running(s, ["made-trainer-0", "made-trainer-1"]))
    s.wait_job("aitrainingjob", "made", "job Running", lambda st: st.get("phase") == "Running")
    assert session.create(_form(s.namespace))[1]["error"] == f"job {s.namespace}/made exists already"

    # Kubeflow's PyTorchJob: its replica types and elasticPolicy, the rest in the annotations any dialect reads.
    workers = [{"name": "Worker", "replicas": "2", "min": "1", "max": "3"}]
    status, answer = session.create(_form(s.namespace, dialect="PyTorchJob", name="made-pt", roles=workers))
    assert status == 200, answer
    job = s.job("pytorchjob", "made-pt")
    assert job["spec"]["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 3}
    assert (
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] == "pytorch"
    )
    annotations = job["metadata"]["annotations"]
    assert (annotations["fault-tolerance/job-retry-num"], annotations["fault-tolerance/hang-retry"]) == (
        "3", "true")  # fmt: skip
    s.wait("its 2 workers running", lambda: _running(s, ["made-pt-worker-0", "made-pt-worker-1"]))
    s.wait_job("pytorchjob", "made-pt", "job Running", lambda st: st.get("phase") == "Running")
    # The pages list both, as they list any job.
    names = [row["name"] for row in session.get("api/jobs")]
    assert names == [f"{s.namespace}/made", f"{s.namespace}/made-pt"]


@pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (scripts/test does)"
)
def test_a_job_made_on_the_operators_create_page_in_the_browser_runs_to_succeeded(
    pages: tuple[Scenario, str],
) -> None:
    playwright_api = pytest.importorskip("playwright.sync_api")
    expect = playwright_api.expect
    s, url = pages
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{url}?token={SECRET}#create")
        expect(page.locator("#access")).to_have_text("kubernetes · actions allowed")
        form = page.locator("form#create")
        expect(form.locator("input[name=namespace]")).to_have_value(s.namespace)
        form.locator("input[name=name]").fill("clicked")
        form.locator("input[name=image]").fill("registry.example/train:1")
        form.locator("input[name=command]").fill("python train.py")
        form.locator("input[name=retries]").fill("0")
        expect(page.locator("#create-problems li")).to_have_text(
            ["clicked.yaml:9: spec.jobRetry.retryNum: retryNum 0 must be at least 1"]
        )
        form.locator("input[name=retries]").fill("2")
        expect(page.locator("#create-verdict")).to_have_text("TrainingJob: valid")
        page.locator("#create-submit").click()
        expect(page.locator("#notice")).to_have_text(f"TrainingJob {s.namespace}/clicked created")
        expect(page.locator("#phase")).to_have_text("Running", timeout=30000)
        assert s.job("trainingjob", "clicked")["spec"]["jobRetry"] == {"retryNum": 2}
        s.exit_pod("clicked-worker-0", 0)  # kwok ends the pod's container: the job is done
        expect(page.locator("#phase")).to_have_text("Succeeded", timeout=30000)
        browser.close()
    assert not errors, errors
