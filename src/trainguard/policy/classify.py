"""Turning what a backend observed into a Fault (docs/policy.md §1, Faults).

Rules, in order: a disappearance trainguard asked for, and a pod that is Pending, Running or Succeeded on a
Ready node, are not faults. An eviction, preemption or DisruptionTarget reason is PodEvicted (whatever the
phase, since an evicted pod also reads Failed). "OOMKilled" is OOMKilled with exit code 137; "Hang" is Hang;
"StartTimeout" is StartTimeout; "HardwareFault" and "PreCheckFailed" (a failed fault tolerance check) are
themselves. A pod on a node that is not Ready, or in phase Unknown (what Kubernetes shows
for a lost node), is NodeNotReady. A pod that vanished (phase Deleted) is PodForceDeleted. Anything else that
ended with a non-zero code, or a signal N (code 128+N), or in phase Failed, is Exited.
"""

from __future__ import annotations

from trainguard.api.model import TrainingJob
from trainguard.policy.roles import resolve_role
from trainguard.policy.types import Fault, FaultKind, Observation, PodRef
from trainguard.policy.words import seconds

OOM_EXIT_CODE = 137
_EVICTION_REASONS = frozenset({"evicted", "preempted", "preempting", "disruptiontarget", "podevicted"})
_BY_REASON = {
    "oomkilled": FaultKind.OOM_KILLED,
    "hang": FaultKind.HANG,
    "starttimeout": FaultKind.START_TIMEOUT,
    "hardwarefault": FaultKind.HARDWARE_FAULT,
    "precheckfailed": FaultKind.PRE_CHECK_FAILED,
}


def classify(obs: Observation) -> Fault | None:
    """The fault ``obs`` shows, or None when it shows none (running, succeeded, or deleted on purpose)."""
    if obs.deleted_by_us:
        return None
    reason = obs.reason.strip().lower() if obs.reason else ""
    if reason in _EVICTION_REASONS:
        return _fault(obs, FaultKind.POD_EVICTED, _exit_code(obs), message=obs.reason or "")
    if reason in _BY_REASON:
        kind = _BY_REASON[reason]
        return _fault(obs, kind, OOM_EXIT_CODE if kind is FaultKind.OOM_KILLED else _exit_code(obs))
    if obs.phase == "Succeeded" or (obs.exit_code == 0 and obs.signal is None):
        return None
    if not obs.node_ready or obs.phase == "Unknown":
        return _fault(obs, FaultKind.NODE_NOT_READY, _exit_code(obs))
    if obs.phase == "Deleted":
        return _fault(obs, FaultKind.POD_FORCE_DELETED, _exit_code(obs))
    code = _exit_code(obs)
    if obs.phase == "Failed" or code is not None:
        return _fault(obs, FaultKind.EXITED, code)
    return None  # running (or starting) on a Ready node: most pods, most of the time, and no Fault built


def _fault(obs: Observation, kind: FaultKind, exit_code: int | None, message: str = "") -> Fault:
    return Fault(kind=kind, pod=obs.pod, at=obs.at, exit_code=exit_code, node=obs.node, message=message)


def _exit_code(obs: Observation) -> int | None:
    if obs.exit_code is not None:
        return obs.exit_code
    return 128 + obs.signal if obs.signal is not None else None


def start_timed_out(job: TrainingJob, pod: PodRef, restarted_at: float, now: float) -> Fault | None:
    """StartTimeout when a pod (re)started at ``restarted_at`` has not reached Running by ``now``.

    The limit is spent once ``restartTimeLimit`` seconds have passed (at exactly the limit, not after).
    """
    role, spec = resolve_role(job, pod.role)
    limit = spec.restart_time_limit
    if limit is None or now - restarted_at < limit:
        return None
    return Fault(
        kind=FaultKind.START_TIMEOUT,
        pod=PodRef(role, pod.index),
        at=now,
        message=f"not Running {seconds(now - restarted_at)} after its restart (restartTimeLimit {limit})",
    )


def check_deadline(job: TrainingJob, started_at: float, now: float) -> Fault | None:
    """Deadline once the job has run ``timeLimit`` seconds (at exactly the limit, not after)."""
    limit = job.spec.time_limit
    if limit is None or now - started_at < limit:
        return None
    return Fault(
        kind=FaultKind.DEADLINE,
        pod=None,
        at=now,
        message=f"ran {seconds(now - started_at)}, timeLimit is {seconds(limit)}",
    )
