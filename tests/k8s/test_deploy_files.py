"""deploy/ holds what ``trainguard crd`` generates, unchanged, and manifests that parse."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainguard.api.crd import aitrainingjob_crd, native_crd, pytorchjob_crd

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
GENERATED = {
    "trainingjobs.trainguard.io.yaml": native_crd,
    "aitrainingjobs.kongming.cce.baiudbce.com.yaml": aitrainingjob_crd,
}


@pytest.mark.parametrize("folder", ["crds", "helm/trainguard/crds"])
@pytest.mark.parametrize("name", sorted(GENERATED))
def test_checked_in_crds_match_the_generator(folder: str, name: str) -> None:
    checked_in = yaml.safe_load((DEPLOY / folder / name).read_text())
    assert checked_in == GENERATED[name](), f"regenerate: trainguard crd ... > deploy/{folder}/{name}"


def test_the_charts_pytorchjob_crd_is_the_generators() -> None:
    lines = (DEPLOY / "helm/trainguard/templates/pytorchjob-crd.yaml").read_text().splitlines()
    # The template's body: between its condition ({{- if ...) and the condition's end.
    first = next(i for i, line in enumerate(lines) if line.startswith("{{- if")) + 1
    body = yaml.safe_load("\n".join(lines[first : lines.index("{{- end }}")]))
    expected = pytorchjob_crd()
    expected["metadata"]["annotations"] = {"helm.sh/resource-policy": "keep"}
    assert body == expected


def test_operator_manifests_parse_and_grant_what_the_operator_does() -> None:
    documents = [
        doc
        for path in sorted((DEPLOY / "operator").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and "kind" in doc
    ]
    kinds = {doc["kind"] for doc in documents}
    assert {"Deployment", "ClusterRole", "Role", "ServiceAccount", "Namespace"} <= kinds
    role = next(doc for doc in documents if doc["kind"] == "ClusterRole")
    granted = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    for needed in [
        ("pods", "create"),
        ("pods", "delete"),
        ("events", "create"),
        ("aitrainingjobs/status", "update"),
        ("trainingjobs", "create"),  # the job pages' create page
        ("aitrainingjobs", "create"),
        ("tokenreviews", "create"),  # which pod an agent's report comes from
        ("nodes", "patch"),  # a faulty node isolated (taint, label), and released
    ]:
        assert needed in granted
    assert ("pods", "update") not in granted  # least privilege: nothing it does not use
    assert ("nodes", "update") not in granted
    assert ("nodes", "delete") not in granted
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in role["rules"])
