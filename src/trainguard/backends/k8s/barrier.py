"""``trainguard barrier``: CCE's job barrier, for the init container of a job's launcher.

CCE's launcher waits in an init container (``jobbarrier --barrier_roles=trainer --incluster --name=JOB
--namespace=NS --dns_check_svc=kube-dns``) until the trainers it will ssh to are up; horovodrun would fail
at once otherwise. This barrier takes the same flags and waits until every pod of the named roles is Running
and Ready (a Horovod host once its sshd answers, ``ssh.readiness_probe``) and its DNS name
(``<pod>.<job>.<namespace>.svc``, behind the job's headless Service) resolves, then exits 0.
How many pods a role should have comes from ``TRAINGUARD_ROLE_SIZES`` (``launcher=1,trainer=3``, which the
operator gives the job's init containers); without it, every pod of the role that exists, and at least one.
A deadline (``--timeout``) that passes exits 1, naming what it still waited for; a bad flag exits 2.

It reads pods only (``list`` in the job's namespace): the operator gives the job's pods exactly that, through
a Role of the job's own.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from trainguard.backends.k8s.metadata import LABEL_INDEX, LABEL_ROLE
from trainguard.backends.k8s.observe import pod_ready
from trainguard.pod import contract

Obj = dict[str, Any]


def parse_sizes(text: str, where: str = contract.ENV_ROLE_SIZES) -> dict[str, int]:
    """``launcher=1,trainer=3`` -> {"launcher": 1, "trainer": 3}; raises ValueError naming the fix."""
    sizes: dict[str, int] = {}
    for part in (item.strip() for item in text.split(",")):
        if not part:
            continue
        role, _, count = part.partition("=")
        if not role or not count.isdigit():
            raise ValueError(f"{where}: {part!r} is not ROLE=COUNT, e.g. trainer=3")
        sizes[role.strip()] = int(count)
    return sizes


def dns_name(pod: str, job: str, namespace: str) -> str:
    return f"{pod}.{job}.{namespace}.svc"


def resolves(name: str) -> bool:
    try:
        socket.getaddrinfo(name, None)
    except OSError:
        return False
    return True


def waiting_for(
    pods: list[Obj],
    job: str,
    namespace: str,
    roles: tuple[str, ...],
    sizes: Mapping[str, int] | None,
    resolve: Callable[[str], bool] = resolves,
) -> list[str]:
    """What is not ready yet, one line each (empty: every pod of ``roles`` runs and resolves)."""
    waiting: list[str] = []
    by_role: dict[str, dict[int, Obj]] = {role: {} for role in roles}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        role, index = labels.get(LABEL_ROLE), labels.get(LABEL_INDEX, "")
        if role in by_role and index.isdigit() and not pod["metadata"].get("deletionTimestamp"):
            by_role[role][int(index)] = pod
    for role in roles:
        present = by_role[role]
        expected = range(sizes[role]) if sizes is not None and role in sizes else sorted(present) or [0]
        for index in expected:
            name = f"{job}-{role}-{index}"
            found = present.get(index)
            if found is None:
                waiting.append(f"{name}: not created yet")
                continue
            phase = (found.get("status") or {}).get("phase") or "Pending"
            if phase != "Running":
                waiting.append(f"{name}: {phase}")
            elif not pod_ready(found.get("status") or {}):
                waiting.append(f"{name}: Running, not Ready yet")
            elif not resolve(dns_name(name, job, namespace)):
                waiting.append(f"{name}: {dns_name(name, job, namespace)} does not resolve yet")
    return waiting


def wait(
    list_pods: Callable[[], list[Obj]],
    job: str,
    namespace: str,
    roles: tuple[str, ...],
    sizes: Mapping[str, int] | None,
    timeout: float,
    say: Callable[[str], None],
    *,
    interval: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    resolve: Callable[[str], bool] = resolves,
) -> list[str]:
    """Waits until nothing is missing (returns []) or ``timeout`` passed (returns what is still missing);
    says what it waits for whenever that changes."""
    deadline = clock() + timeout
    said: list[str] | None = None
    while True:
        missing = waiting_for(list_pods(), job, namespace, roles, sizes, resolve)
        if missing != said:
            say("every pod is up" if not missing else "waiting for " + "; ".join(missing))
            said = missing
        if not missing or clock() >= deadline:
            return missing
        sleep(interval)
