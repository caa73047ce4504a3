"""Which kubectl reads the tests' API client serves itself, and the path it reads (tests/k8s/cluster.py)."""

from __future__ import annotations

import pytest

from tests.k8s.cluster import read_path


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("get", "pods"), ("/api/v1/namespaces/default/pods", {})),
        (("get", "pod", "w-0", "-n", "ns"), ("/api/v1/namespaces/ns/pods/w-0", {})),
        (("get", "-n", "ns", "pod/w-0"), ("/api/v1/namespaces/ns/pods/w-0", {})),
        (("get", "nodes", "-l", "a=b"), ("/api/v1/nodes", {"labelSelector": "a=b"})),
        (("get", "node", "n-1"), ("/api/v1/nodes/n-1", {})),
        (
            ("get", "events", "--field-selector", "reason=Scaling"),
            ("/api/v1/namespaces/default/events", {"fieldSelector": "reason=Scaling"}),
        ),
        (
            ("get", "aitrainingjob", "job", "-n", "x"),
            ("/apis/kongming.cce.baiudbce.com/v1/namespaces/x/aitrainingjobs/job", {}),
        ),
        (("get", "trainingjobs/j"), ("/apis/trainguard.io/v1/namespaces/default/trainingjobs/j", {})),
        (("get", "pytorchjob", "p"), ("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/p", {})),
        (("get", "lease", "l", "-n", "s"), ("/apis/coordination.k8s.io/v1/namespaces/s/leases/l", {})),
        (
            ("get", "podgroup", "g"),
            ("/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/g", {}),
        ),
    ],
)
def test_a_plain_get_is_read_through_the_api(
    args: tuple[str, ...], expected: tuple[str, dict[str, str]]
) -> None:
    assert read_path(args) == expected


@pytest.mark.parametrize(
    "args",
    [
        ("apply", "-f", "-"),  # not a read
        ("get", "crd", "x"),  # a kind it does not know
        ("get", "pods", "-A"),  # an option it does not know
        ("get", "pods", "a", "b"),  # two names
        ("get", "pod", "a", "-l", "x=y"),  # a name and a selector: kubectl refuses it
        ("get",),
    ],
)
def test_anything_else_is_left_to_kubectl(args: tuple[str, ...]) -> None:
    assert read_path(args) is None
