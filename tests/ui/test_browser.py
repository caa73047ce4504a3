"""The job pages in a real browser (Debian's Chromium, driven by Playwright) against a real local job.

Screenshots of the job page are saved as artifacts (``$TRAINGUARD_ARTIFACTS``, else the test's directory)."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.integration.local.harness import LocalRuntime
from tests.integration.local.jobs import TICKING, simple_job, with_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(
        "Debian's chromium is not installed (scripts/test installs it as root)", allow_module_level=True
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.on("dialog", lambda dialog: errors.append(f"a dialog opened: {dialog.message}"))
    yield opened
    context.close()
    assert not errors, errors  # no script error, no injected alert()


def _artifact(name: str, tmp_path: Path) -> Path:
    directory = Path(os.environ.get("TRAINGUARD_ARTIFACTS", tmp_path))
    directory.mkdir(parents=True, exist_ok=True)
    return directory / name


def test_a_job_seen_faulted_and_scaled_from_its_page(
    local: LocalRuntime, job: str, secret_url: str, page: Any, tmp_path: Path
) -> None:
    expect = playwright_api.expect
    page.goto(secret_url)
    expect(page.locator("#access")).to_have_text("local · actions allowed")
    # The jobs list shows the job, as it changes.
    link = page.locator("a.job-link", has_text="pages")
    expect(link).to_be_visible()
    expect(page.locator("#jobs")).to_contain_text("worker 2/2 (1\u20133)")
    link.click()
    expect(page.locator("#phase")).to_have_text("Running")
    expect(page.locator("#pods tbody tr")).to_have_count(2)

    # A chaos kill (from the CLI) appears in the history and the timeline within 2 s.
    assert local.cli("chaos", "kill", "pages-worker-1").code == 0
    killed = time.monotonic()
    expect(page.locator("#history tbody tr").first).to_contain_text("pages-worker-1", timeout=2000)
    expect(page.locator("#timeline svg path.fault")).to_have_count(1, timeout=2000)
    assert time.monotonic() - killed < 2.5
    expect(page.locator("#history tbody tr").first).to_contain_text("Exited 137")

    # Scaling from the page: out of [min, max] refused with the CLI's words; within, the pods change.
    form = page.locator("form.scale[data-role=worker]")
    form.locator("input").fill("7")
    form.locator("button").click()
    expect(page.locator("#notice")).to_contain_text("replicas 7 outside [1, 3]")
    form.locator("input").fill("3")
    form.locator("button").click()
    expect(page.locator("#notice")).to_have_text("pages: worker scaled to 3")
    expect(page.locator("#pods tbody tr")).to_have_count(3, timeout=15000)
    local.wait_running(job, 3)

    # What if: the same engine as trainguard explain.
    page.locator("#whatif select[name=pod]").select_option("pages-worker-0")
    page.locator("#whatif input[name=exit-code]").fill("137")
    page.locator("#whatif button").click()
    expect(page.locator("#whatif-answer [data-field=rule]")).to_have_text("restartPolicy (OnFailure)")

    # Log lines with markup in them are text.
    page.locator("#logs select").select_option("pages-worker-0")
    page.locator("#logs button").click()
    expect(page.locator("#log")).to_contain_text("<img src=x onerror=alert(1)><b>bold</b>")
    assert page.locator("#log img, #log b").count() == 0
    page.screenshot(path=str(_artifact("job-page.png", tmp_path)), full_page=True)


def test_a_job_name_with_markup_is_text_and_a_page_without_the_secret_is_read_only(
    job: str, secret_url: str, page: Any
) -> None:
    expect = playwright_api.expect
    split = urlsplit(secret_url)
    plain = f"{split.scheme}://{split.netloc}/"
    page.goto(plain + "#job=" + "<b id=injected>x</b><img src=x onerror=alert(1)>")
    expect(page.locator("#where")).to_have_text("job <b id=injected>x</b><img src=x onerror=alert(1)>")
    expect(page.locator("#notice")).to_contain_text("no job '<b id=injected>x</b>")
    assert page.locator("#injected, main img").count() == 0
    page.goto(plain + "#job=" + job)
    expect(page.locator("#access")).to_have_text("local · read-only")
    expect(page.locator("form.scale[data-role=worker] button")).to_be_disabled()
    # A POST without the session's token is refused, whatever the page does.
    status = page.evaluate(
        """async (job) => (await fetch(`/api/jobs/${job}/scale`, {method: "POST",
            headers: {"Content-Type": "application/json"}, body: JSON.stringify({role: "worker", replicas: 3})})).status""",
        job,
    )
    assert status == 403


def test_a_live_re_formation_shows_in_the_history_with_its_own_words(
    local: LocalRuntime, job: str, secret_url: str, page: Any
) -> None:
    """A round the live workers of two pods formed, as their agents report it (their report files, read by the
    local runtime): one entry for the job, worded as a re-formation, not a fault."""
    expect = playwright_api.expect
    page.goto(secret_url + f"#job={job}")
    expect(page.locator("#phase")).to_have_text("Running")
    for index in (0, 1):
        line = {"event": "live-reformed", "time": time.time(), "pid": None, "attempt": 1, "round": 2,
                "rank": index, "world_size": 2, "step": 30, "origin": "peer" if index else "live",
                "seconds": 0.4, "cause": "RuntimeError: Connection closed by peer", "at": time.time()}  # fmt: skip
        with local.home.report_file(job, f"{job}-worker-{index}", 1).open("a") as report:
            report.write(json.dumps(line) + "\n")
    row = page.locator("#history tbody tr").first
    expect(row).to_contain_text(
        "re-formed live: round 2, 2 workers at step 30 (the state from a peer)", timeout=5000
    )
    expect(row).to_contain_text("0.4 s")
    expect(page.locator("#history tbody tr")).to_have_count(1)
    expect(page.locator("#events")).to_contain_text("LiveReformed")


#: A job of the create page that runs a moment and succeeds.
SHORT = "python3 -c 'import time; [time.sleep(0.2) for _ in range(5)]; print(\"done\")'"


def test_a_job_made_on_the_create_page_is_checked_as_validate_checks_it_and_runs_to_succeeded(
    local: LocalRuntime, ui_url: str, page: Any, tmp_path: Path
) -> None:
    expect = playwright_api.expect
    page.goto(ui_url)
    expect(page.locator("#access")).to_have_text("local · actions allowed")
    page.locator("#create-link").click()
    form = page.locator("form#create")
    form.locator("input[name=name]").fill("made")
    role = form.locator("tr.role")
    role.locator("input[name=role-replicas]").fill("2")
    role.locator("input[name=role-min]").fill("1")
    role.locator("input[name=role-max]").fill("3")
    form.locator("input[name=command]").fill(SHORT)
    yaml_shown, problems = page.locator("#create-yaml"), page.locator("#create-problems li")
    # The YAML the server writes, as the form changes; a retry count out of 1-128 is validate's error.
    form.locator("input[name=retries]").fill("0")
    expect(yaml_shown).to_contain_text("retryNum: 0")
    expect(problems).to_have_text(["made.yaml:9: spec.jobRetry.retryNum: retryNum 0 must be at least 1"])
    page.locator("#create-submit").click()
    expect(page.locator("#notice")).to_contain_text("nothing was submitted")
    assert local.call("get") == []
    form.locator("input[name=retries]").fill("129")
    expect(problems).to_have_text(["made.yaml:9: spec.jobRetry.retryNum: retryNum 129 must be at most 128"])
    form.locator("input[name=retries]").fill("3")
    expect(page.locator("#create-verdict")).to_have_text("TrainingJob: valid")
    expect(problems).to_have_count(0)
    # ModelArts' spelling: its annotations; restart upon suspension with its timeout.
    form.locator("select[name=dialect]").select_option("ModelArts")
    form.locator("input[name=hang_restart]").check()
    form.locator("input[name=hang_timeout]").fill("60")
    expect(yaml_shown).to_contain_text("fault-tolerance/job-retry-num: '3'")
    expect(yaml_shown).to_contain_text("fault-tolerance/hang-retry: 'true'")
    expect(yaml_shown).to_contain_text("trainguard.io/hang-timeout-seconds: '60'")
    expect(page.locator("#create-verdict")).to_have_text("TrainingJob: valid")
    page.screenshot(path=str(_artifact("create-page.png", tmp_path)), full_page=True)
    page.locator("#create-submit").click()
    # Submitted: the job's own page, which follows it to the end.
    expect(page.locator("#notice")).to_have_text("job made submitted")
    expect(page.locator("#where")).to_have_text("job made")
    expect(page.locator("#pods tbody tr")).to_have_count(2, timeout=15000)
    expect(page.locator("#phase")).to_have_text("Succeeded", timeout=60000)
    spec = local.view("made")["spec"]
    assert (spec["jobRetry"]["retryNum"], spec["hang"]["timeoutSeconds"]) == (3, 60)


def test_a_pods_hang_restarts_show_on_the_job_page(local: LocalRuntime, ui_url: str, page: Any) -> None:
    """A hung pod restarted in place: its hang restarts counted in a column of their own, not as restarts."""
    expect = playwright_api.expect
    job = with_spec(
        simple_job("hung", TICKING, replicas=2), hang={"timeoutSeconds": 1.5, "gracePeriodSeconds": 1}
    )
    local.submit(job)
    local.wait_running("hung", 2)
    page.goto(ui_url + "#job=hung")
    expect(page.locator("#pods thead th").nth(6)).to_have_text("hang restarts")
    row = page.locator("#pods tbody tr", has_text="hung-worker-1")
    expect(row.locator("td").nth(6)).to_have_text("0")
    assert local.cli("chaos", "hang", "hung-worker-1").code == 0
    expect(row.locator("td").nth(6)).to_have_text("1", timeout=20000)
    expect(row.locator("td").nth(5)).to_have_text("0")  # restarts: nothing relaunched
    expect(row.locator("td").nth(4)).to_have_text("Running")
    page.locator("#home").click()
    expect(page.locator("#jobs tbody tr", has_text="hung").locator("td").nth(4)).to_have_text("1")
