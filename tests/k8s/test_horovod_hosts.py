"""How a Horovod job's discovery names its worker pods (pure, no cluster): by IP, so that a replaced pod (same
name, new IP) is a new host to Horovod, which blacklists a failed host name for good; by DNS name where the IP
is not known or is the node's."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.backends.k8s import discovery

from .launches import cce_job

POD = "test-horovod-elastic-trainer-1"


@pytest.mark.parametrize(
    ("observed", "host"),
    [
        ({"status": {"podIP": "10.244.1.7"}}, "10.244.1.7"),
        ({"status": {"podIP": "10.244.2.9"}}, "10.244.2.9"),  # the same pod replaced: another host
        ({"status": {}}, f"{POD}.test-horovod-elastic"),
        (None, f"{POD}.test-horovod-elastic"),
        ({"spec": {"hostNetwork": True}, "status": {"podIP": "10.201.0.1"}}, f"{POD}.test-horovod-elastic"),
    ],
)
def test_a_worker_pod_is_named_by_its_ip_where_it_has_its_own(
    observed: dict[str, Any] | None, host: str
) -> None:
    assert discovery.horovod_host(cce_job(), POD, observed) == host
