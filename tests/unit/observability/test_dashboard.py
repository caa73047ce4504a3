"""deploy/grafana/trainguard-dashboard.json shows every metric there is, and only metrics there are, in queries
that Prometheus's own parser accepts: promtool, built from source by scripts/build-promtool (scripts/test runs
it before pytest). Without that build the promtool test fails, unless TRAINGUARD_SKIP_PROMTOOL=1 says that
skipping it is intended."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainguard.observability.metrics import CONTROLLER_METRICS, JOB_METRICS, MetricType

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "trainguard-dashboard.json"
BUILD_PROMTOOL = ROOT / "scripts" / "build-promtool"
_METRIC = re.compile(r"\btrainguard_[a-z_]+")
_SUFFIXES = ("_bucket", "_sum", "_count")


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def exposed() -> set[str]:
    names = set()
    for spec in (*JOB_METRICS, *CONTROLLER_METRICS):
        names.add(spec.name)
        if spec.type is MetricType.HISTOGRAM:
            names.update(spec.name + suffix for suffix in _SUFFIXES)
    return names


def test_every_query_names_metrics_that_exist() -> None:
    for expr in exprs(load()):
        used = set(_METRIC.findall(expr))
        assert used, expr
        assert used <= exposed(), (expr, used - exposed())


def test_every_metric_has_a_panel() -> None:
    used = {name for expr in exprs(load()) for name in _METRIC.findall(expr)}
    shown = {name.removesuffix(s) for name in used for s in (*_SUFFIXES, "") if name.endswith(s)}
    for spec in (*JOB_METRICS, *CONTROLLER_METRICS):
        assert spec.name in shown, spec.name


def test_panels_fit_the_grid_with_unique_ids_and_the_variables_are_used() -> None:
    dashboard = load()
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "namespace", "trainingjob"}
    job_queries = [e for e in exprs(dashboard) if "controller" not in e and "trainguard_jobs" not in e]
    assert all('trainingjob=~"$trainingjob"' in e for e in job_queries)


@pytest.fixture(scope="module")
def promtool() -> str:
    """The cached promtool of scripts/build-promtool (`path` only looks: it never builds)."""
    found = subprocess.run(
        [str(BUILD_PROMTOOL), "path"], capture_output=True, text=True, timeout=60, check=False
    )
    if found.returncode == 0:
        return found.stdout.strip()
    if os.environ.get("TRAINGUARD_SKIP_PROMTOOL") == "1":
        pytest.skip("promtool is not built and TRAINGUARD_SKIP_PROMTOOL=1: the PromQL check skipped")
    pytest.fail(
        f"{found.stderr.strip()}\n(scripts/build-promtool builds it once from source and caches it; "
        "TRAINGUARD_SKIP_PROMTOOL=1 skips this test)"
    )


def check_rules(promtool: str, queries: list[str], directory: Path) -> subprocess.CompletedProcess[str]:
    """promtool's verdict on the queries as the recording rules of one group."""
    rules = [{"record": f"dashboard:query_{n}", "expr": expr} for n, expr in enumerate(queries)]
    path = directory / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    return subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )


def test_every_query_is_valid_promql(promtool: str, tmp_path: Path) -> None:
    """promtool parses every query as a recording rule (Grafana's variables filled in)."""
    fill = {"$__rate_interval": "1m", "$namespace": ".*", "$trainingjob": ".*"}
    queries = []
    for expr in exprs(load()):
        for variable, value in fill.items():
            expr = expr.replace(variable, value)
        queries.append(expr)
    checked = check_rules(promtool, queries, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(queries)} rules found" in checked.stdout, checked.stdout


def test_promtool_rejects_a_broken_query(promtool: str, tmp_path: Path) -> None:
    """The check above can fail: an unclosed grouping and an unknown function do not pass."""
    for broken in ["sum by (role (trainguard_pods)", "rate_of(trainguard_faults_total[1m])"]:
        checked = check_rules(promtool, [broken], tmp_path)
        assert checked.returncode != 0, broken
