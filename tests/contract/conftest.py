"""The ``driver`` fixture: every contract scenario runs once per backend.

A new backend adds its driver here (the simulator's and the Kubernetes operator's come with their issues).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.local.harness import LocalRuntime
from tests.k8s.conftest import kube_cluster  # noqa: F401  (the k8s driver's cluster)
from trainguard.backends.local.home import ENV_HOME

from .driver import Driver
from .fake_driver import FakeDriver
from .k8s_driver import KubeDriver
from .local_driver import LocalDriver
from .sim_driver import SimDriver


@pytest.fixture(
    params=[
        "fake",
        "sim",
        pytest.param("local", marks=pytest.mark.integration),
        pytest.param("k8s", marks=pytest.mark.k8s),
    ]
)
def driver(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Driver]:
    chosen: Driver
    if request.param == "fake":
        chosen = FakeDriver()
    elif request.param == "sim":
        chosen = SimDriver()
    elif request.param == "k8s":
        chosen = KubeDriver(request.getfixturevalue("kube_cluster"), tmp_path)
    else:
        runtime = LocalRuntime(tmp_path)
        monkeypatch.setenv(ENV_HOME, str(runtime.home.root))
        monkeypatch.setenv("TRAINGUARD_IDLE_EXIT", "120")
        chosen = LocalDriver(runtime)
    yield chosen
    chosen.close()
