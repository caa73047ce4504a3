"""``trainguard operator --pytorchjobs`` refuses a PyTorchJob CRD that would prune the status it keeps."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.test_crd import KUBEFLOWS
from trainguard.api.crd import pytorchjob_crd
from trainguard.backends.k8s.client import ApiError
from trainguard.cli.errors import CliError
from trainguard.cli.verbs.operator import check_pytorchjob_crd

PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org"


class Answers:
    """What the API server answers to GET the CRD: an object, or an error."""

    def __init__(self, answer: dict[str, Any] | Exception) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def get(self, path: str) -> dict[str, Any]:
        self.asked.append(path)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_kubeflows_crd_is_refused_with_the_fix() -> None:
    kube = Answers(KUBEFLOWS)
    with pytest.raises(CliError) as refused:
        check_pytorchjob_crd(kube)
    assert kube.asked == [PATH]
    message = str(refused.value)
    assert "pytorchjobs.kubeflow.org" in message
    assert "trainguard crd --dialect pytorchjob | kubectl replace -f -" in message


@pytest.mark.parametrize(
    "answer",
    [pytorchjob_crd(), ApiError(404, "not found"), ApiError(403, "forbidden"), ConnectionRefusedError()],
    ids=["trainguards-crd", "not-installed", "forbidden", "unreachable"],
)
def test_anything_else_lets_the_operator_start(answer: dict[str, Any] | Exception) -> None:
    check_pytorchjob_crd(Answers(answer))
