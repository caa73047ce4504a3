"""deploy/grafana/trainguard-dashboard.json shows every metric there is, and only metrics there are."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainguard.controller.metrics import CONTROLLER_METRICS, JOB_METRICS, MetricType

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "trainguard-dashboard.json"
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


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Prometheus) is not installed")
def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses every query as a recording rule (Grafana's variables filled in)."""
    fill = {"$__rate_interval": "1m", "$namespace": ".*", "$trainingjob": ".*"}
    rules = []
    for number, expr in enumerate(exprs(load())):
        for variable, value in fill.items():
            expr = expr.replace(variable, value)
        rules.append({"record": f"dashboard:query_{number}", "expr": expr})
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
