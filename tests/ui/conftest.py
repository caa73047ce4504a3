"""The job pages against a real local control plane (its own TRAINGUARD_HOME) running a real job."""

from __future__ import annotations

import pytest

from tests.integration.local import conftest as local_conftest
from tests.integration.local.harness import LocalRuntime
from tests.integration.local.jobs import simple_job

#: Every test here gets a local runtime of its own, as the local runtime's tests do.
local = local_conftest.local

#: A worker that says something with markup in it now and then, and runs until stopped.
WORKER = [
    "python3",
    "-u",
    "-c",
    "import time\nfor i in range(100000):\n    print(f'step {i} <img src=x onerror=alert(1)><b>bold</b>')\n"
    "    time.sleep(0.5)",
]


@pytest.fixture
def job(local: LocalRuntime) -> str:
    """``pages``: 2 workers (1 to 3), restarted on any failure; running."""
    name = local.submit(simple_job("pages", WORKER, replicas=2, minReplicas=1, maxReplicas=3,
                                   restartPolicy="OnFailure"))  # fmt: skip
    local.wait_running(name, 2)
    return name


@pytest.fixture
def ui_url(local: LocalRuntime) -> str:
    """The address ``trainguard ui --url`` prints (with the secret that allows actions), no job yet."""
    result = local.cli("ui", "--url")
    assert result.code == 0, result.err
    url = result.out.strip()
    assert url.startswith("http://127.0.0.1:"), url
    assert "?token=" in url, url
    return url


@pytest.fixture
def secret_url(job: str, ui_url: str) -> str:
    """``ui_url`` with the ``pages`` job running."""
    return ui_url
