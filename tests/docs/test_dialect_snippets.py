"""The job files the dialect pages show (```yaml blocks whose first line names a file) load as the page says."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainguard.api.load import load_bytes

DIALECTS = Path(__file__).resolve().parents[2] / "docs" / "dialects"


def _snippets() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DIALECTS.glob("*.md")):
        text = page.read_text()
        for block in text.split("```yaml\n")[1:]:
            body = block.split("```", 1)[0]
            lines = [line[2:] if line.startswith("  ") else line for line in body.splitlines()]
            if lines and lines[0].startswith("# ") and ".yaml" in lines[0]:
                found.append((page.name, "\n".join(lines)))
    return found


def test_the_pages_have_snippets() -> None:
    assert any(page == "pytorchjob.md" for page, _ in _snippets())


@pytest.mark.parametrize(("page", "body"), _snippets(), ids=[page for page, _ in _snippets()])
def test_each_snippet_loads(page: str, body: str) -> None:
    loaded = load_bytes(body.encode(), f"docs/dialects/{page}")
    assert [job.job.name for job in loaded] == [yaml.safe_load(body)["metadata"]["name"]]


def test_the_kubeflow_whole_job_restart_snippet_says_what_the_page_says() -> None:
    (body,) = [body for page, body in _snippets() if page == "pytorchjob.md"]
    (loaded,) = load_bytes(body.encode(), "docs/dialects/pytorchjob.md")
    spec = loaded.job.spec
    assert spec.job_retry is not None
    assert spec.job_retry.retry_num == 3
    assert spec.hang is not None
    assert (spec.hang.enabled, spec.hang.timeout_seconds, spec.hang.max_consecutive) == (True, 900, 3)
