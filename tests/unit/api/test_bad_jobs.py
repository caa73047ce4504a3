"""Every invalid job gets one clear problem: the file, the field path as written, and what is allowed."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.api.jobdata import DELETE, cce_job, edited, error_of, native, pytorchjob
from trainguard.api import SpecError
from trainguard.api.load import load_bytes

ROLE = "spec.replicaSpecs.worker"
TRAINER = "spec.replicaSpecs.trainer"

# (document, path of the problem, what its message says)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "min above max",
        edited(native(), f"{ROLE}.minReplicas", 4),
        f"{ROLE}.minReplicas",
        r"minReplicas 4 > maxReplicas 3",
    ),
    (
        "replicas outside bounds",
        edited(edited(cce_job(), f"{TRAINER}.replicas", 7), f"{TRAINER}.maxReplicas", 5),
        f"{TRAINER}.replicas",
        r"replicas 7 outside \[1, 5\]",
    ),
    (
        "unknown restartPolicy",
        edited(native(), f"{ROLE}.restartPolicy", "OnFailed"),
        f"{ROLE}.restartPolicy",
        r'restartPolicy "OnFailed" is not one of Never, OnFailure, Always, ExitCode, OnNodeFail, '
        r"OnNodeFailWithExitCode \(did you mean OnFailure\?\)",
    ),
    (
        "exit codes that are not codes",
        edited(native(), f"{ROLE}.faultTolerantPolicy.0.exitCodes", "1-x"),
        f"{ROLE}.faultTolerantPolicy[0].exitCodes",
        r'exitCodes "1-x": not a code or range',
    ),
    (
        "exit codes above 255 in the native form",
        edited(native(), f"{ROLE}.faultTolerantPolicy.0.exitCodes", "300"),
        f"{ROLE}.faultTolerantPolicy[0].exitCodes",
        r'exitCodes "300": codes above 255 cannot occur',
    ),
    (
        "unknown exceptional event",
        edited(native(), f"{ROLE}.faultTolerantPolicy", [{"exceptionalEvent": "nodeOnFire"}]),
        f"{ROLE}.faultTolerantPolicy[0].exceptionalEvent",
        r"exceptionalEvent 'nodeOnFire' is not an exceptional event; allowed: nodeNotReady, PodForceDeleted",
    ),
    (
        "job name that is not a Kubernetes name",
        edited(native(), "metadata.name", "My_Job"),
        "metadata.name",
        r"name 'My_Job' is not a valid Kubernetes name",
    ),
    (
        "retry-num annotation out of range",
        edited(native(), "metadata.annotations", {"fault-tolerance/job-retry-num": "200"}),
        'metadata.annotations["fault-tolerance/job-retry-num"]',
        r'fault-tolerance/job-retry-num "200": must be 1-128',
    ),
    (
        "hang-retry annotation that is not a flag",
        edited(native(), "metadata.annotations", {"fault-tolerance/hang-retry": "yes"}),
        'metadata.annotations["fault-tolerance/hang-retry"]',
        r'fault-tolerance/hang-retry "yes": must be "true" or "false"',
    ),
    (
        "annotation value that is not a string",
        edited(native(), "metadata.annotations", {"fault-tolerance/hang-retry": True}),
        'metadata.annotations["fault-tolerance/hang-retry"]',
        r'must be a string, not true \(quote it: "true"\)',
    ),
    (
        "unknown field, with a suggestion",
        edited(native(), f"{ROLE}.restartLimt", 3),
        f"{ROLE}.restartLimt",
        r'unknown field "restartLimt" \(did you mean restartLimit\?\); allowed here: replicaType, replicas,',
    ),
    (
        "snake_case field",
        edited(native(), f"{ROLE}.restart_policy", "Never"),
        f"{ROLE}.restart_policy",
        r'unknown field "restart_policy" \(did you mean restartPolicy\?\)',
    ),
    (
        "a number written as a string",
        edited(native(), f"{ROLE}.replicas", "2"),
        f"{ROLE}.replicas",
        r'replicas must be a whole number, not "2" \(remove the quotes\)',
    ),
    (
        "a list where a mapping belongs",
        edited(native(), "spec.replicaSpecs", ["worker"]),
        "spec.replicaSpecs",
        r"replicaSpecs must be a mapping \(key: value\), not a list",
    ),
    (
        "a boolean written as a word",
        edited(native(), "spec.suspend", "maybe"),
        "spec.suspend",
        r'suspend must be true or false, not "maybe"',
    ),
    (
        "negative replicas",
        edited(native(), f"{ROLE}.replicas", -1),
        f"{ROLE}.replicas",
        r"replicas -1 must be at least 0",
    ),
    ("missing spec", edited(native(), "spec", DELETE), "spec", r"spec is required"),
    (
        "no roles",
        edited(native(), "spec.replicaSpecs", {}),
        "spec.replicaSpecs",
        r"replicaSpecs: a job needs at least one role",
    ),
    (
        "a rule with neither matcher",
        edited(native(), f"{ROLE}.faultTolerantPolicy", [{"restartPolicy": "Never"}]),
        f"{ROLE}.faultTolerantPolicy[0]",
        r"give exactly one of exitCodes or exceptionalEvent",
    ),
    (
        "both spellings of the time limit",
        edited(edited(native(), "spec.timeLimit", 60), "spec.activeDeadlineSeconds", 60),
        "spec.activeDeadlineSeconds",
        r'"activeDeadlineSeconds" is another name for "timeLimit", which is also given',
    ),
    (
        "nProcPerNode of the wrong kind",
        edited(native(), "spec.elastic", {"nProcPerNode": [1]}),
        "spec.elastic.nProcPerNode",
        r"nProcPerNode must be a whole number or a string, not a list",
    ),
    (
        "unknown apiVersion and kind",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
        "apiVersion",
        r'"v1" "Pod" is not a job trainguard reads; it reads trainguard.io/v1 TrainingJob, '
        r"kongming.cce.baiudbce.com/v1 AITrainingJob, kongming.cce.baidubce.com/v1 AITrainingJob, "
        r"kubeflow.org/v1 PyTorchJob",
    ),
    (
        "a Kubeflow kind trainguard does not read",
        {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "t"}},
        "kind",
        r'kind "TFJob" is not read for kubeflow.org/v1; use PyTorchJob',
    ),
    (
        "an old apiVersion of a known kind",
        edited(pytorchjob(), "apiVersion", "kubeflow.org/v1beta2"),
        "apiVersion",
        r'apiVersion "kubeflow.org/v1beta2" is not read for PyTorchJob; use kubeflow.org/v1',
    ),
    (
        "no apiVersion",
        edited(native(), "apiVersion", DELETE),
        "apiVersion",
        r"apiVersion is required; trainguard reads trainguard.io/v1 TrainingJob",
    ),
    (
        "an overlay given as the job",
        {"kind": "job", "metadata": {"annotations": {"fault-tolerance/hang-retry": "true"}}},
        "kind",
        r'this is an annotation overlay \(kind "job"\), not a job: lay it over a job with --overlay job.yaml',
    ),
]


@pytest.mark.parametrize(
    ("document", "path", "message"), [case[1:] for case in CASES], ids=[c[0] for c in CASES]
)
def test_one_clear_problem(document: dict[str, Any], path: str, message: str) -> None:
    error = error_of(document)
    assert len(error.problems) == 1, str(error)
    problem = error.problems[0]
    assert problem.file == "job.yaml"
    assert problem.path == path
    assert re.search(message, problem.message), problem.message
    assert problem.line is not None  # YAML input: the line of the field (or of its nearest parent)


def test_the_line_is_where_the_field_is_written() -> None:
    text = b"""apiVersion: trainguard.io/v1
kind: TrainingJob
metadata:
  name: small
spec:
  replicaSpecs:
    worker:
      replicas: 2
      restartPolicy: OnFailed
"""
    with pytest.raises(
        SpecError, match=r"^job.yaml:9: spec.replicaSpecs.worker.restartPolicy: restartPolicy"
    ):
        load_bytes(text, "job.yaml")


def test_every_problem_of_a_document_is_reported_at_once() -> None:
    document = edited(native(), "spec.replicaSpecs.worker.restartPolicy", "OnFailed")
    document = edited(document, "spec.replicaSpecs.worker.restartScope", "Everything")
    document = edited(document, "metadata.name", "Bad Name")
    paths = {problem.path for problem in error_of(document).problems}
    assert paths == {"metadata.name", f"{ROLE}.restartPolicy", f"{ROLE}.restartScope"}


def test_problems_of_every_document_in_a_file() -> None:
    good = "apiVersion: trainguard.io/v1\nkind: TrainingJob\nmetadata: {name: a}\nspec: {replicaSpecs: {w: {}}}\n"
    bad = good.replace("name: a", "name: B_").replace("w: {}", "w: {replicas: x}")
    with pytest.raises(SpecError) as info:
        load_bytes(f"{good}---\n{bad}---\n[1, 2]\n".encode(), "many.yaml")
    lines = str(info.value).splitlines()
    assert lines == [
        "many.yaml:8: metadata.name: name 'B_' is not a valid Kubernetes name: use at most 63 lowercase "
        "letters, digits and '-', starting and ending with a letter or digit",
        'many.yaml:9: spec.replicaSpecs.w.replicas: replicas must be a whole number, not "x"',
        "many.yaml:11: document 3 is a list; a job is a mapping with apiVersion, kind, metadata and spec",
    ]


@pytest.mark.parametrize("make", [native, cce_job], ids=["native", "aitrainingjob"])
def test_paddle_is_refused_with_what_to_write_instead(make: Any) -> None:
    data = make()
    data["spec"]["frameworkType"] = "paddle"
    (problem,) = error_of(data).problems
    assert problem.path == "spec.frameworkType"
    assert "frameworkType paddle is not supported yet" in problem.message
    assert "use frameworkType: generic" in problem.message
