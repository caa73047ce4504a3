"""How the counters move: the state after a decision was carried out, after progress, after a start.

- A restart adds one to RESTARTS of every pod it touches and to the restart count of every role it touches
  (once per decision); a counted one also records its time for the role's restartLimit window, adds one to
  the job's backoffLimit count and, for a job retry, to the job retries spent.
- A hang restart in place reschedules nothing, so it adds to neither RESTARTS nor the role's restart count
  (the controller shows it on its own, as hang restarts); like a restart it starts the pod's run again.
- The faulted pod's backoff streak grows by one per counted restart (starting again at one when the pod had
  run healthily); a restart in place grows its consecutive hangs instead.
- Restarted pods are neither failed nor succeeded any more, and a role whose every pod is restarted
  (scope Replica or All) is no longer failed.
- A permanent failure marks the pod failed; fail-role marks the role failed; fail-job records why the job
  failed (and whether it timed out). A pod that exited 0 and is not run again has succeeded.
"""

from __future__ import annotations

from dataclasses import replace

from trainguard.api.model import RestartScope
from trainguard.policy.types import (
    RULE_JOB_RETRY,
    RULE_UNCONDITIONAL_RETRY,
    Decision,
    FaultKind,
    PodCounters,
    PodRef,
    PolicyState,
    Remedy,
)

_RESTARTS = frozenset({Remedy.RESTART, Remedy.RESTART_IN_PLACE})


def apply_decision(state: PolicyState, decision: Decision, now: float) -> PolicyState:
    """The state after ``decision`` was carried out at ``now``."""
    if decision.action in _RESTARTS:
        return _after_restart(state, decision, now)
    fault = decision.fault
    pod = fault.pod
    if decision.permanent and pod is not None:
        state = replace(state, failed_pods=state.failed_pods | {pod})
    elif decision.action is Remedy.NONE and pod is not None and _succeeded(decision):
        state = replace(state, succeeded_pods=state.succeeded_pods | {pod})
    if decision.action is Remedy.FAIL_ROLE and pod is not None:
        state = state.with_failed_role(pod.role, decision.reason)
    if decision.action is Remedy.FAIL_JOB:
        state = replace(
            state,
            job_failure=decision.reason,
            timed_out=state.timed_out or fault.kind is FaultKind.DEADLINE,
        )
    return state


def _succeeded(decision: Decision) -> bool:
    return decision.fault.kind is FaultKind.EXITED and decision.fault.exit_code == 0


def _after_restart(state: PolicyState, decision: Decision, now: float) -> PolicyState:
    faulted = decision.fault.pod
    in_place = decision.action is Remedy.RESTART_IN_PLACE
    added = 0 if in_place else 1  # a hang restart in place is no restart to RESTARTS or restartCounts
    pods = dict(state.pods)
    for ref in decision.pods:
        counters = pods.get(ref, PodCounters())
        pods[ref] = replace(
            counters, restarts=counters.restarts + added, last_restart_at=now, running_since=None
        )
    if faulted is not None:
        counters = pods.get(faulted, PodCounters())
        if in_place:
            counters = replace(counters, consecutive_hangs=counters.consecutive_hangs + 1)
        elif decision.counted:
            streak = 1 if decision.healthy_before else counters.backoff_streak + 1
            counters = replace(counters, backoff_streak=streak)
        pods[faulted] = counters

    roles = {ref.role for ref in decision.pods}
    role_restarts = dict(state.role_restarts)
    if not in_place:
        for role in roles:
            role_restarts[role] = role_restarts.get(role, 0) + 1
    touched = frozenset(decision.pods)
    whole_roles = decision.scope in (RestartScope.REPLICA, RestartScope.ALL)
    state = replace(
        state,
        pods=pods,
        role_restarts=role_restarts,
        failed_pods=state.failed_pods - touched,
        succeeded_pods=state.succeeded_pods - touched,
        failed_roles={r: why for r, why in state.failed_roles.items() if not (whole_roles and r in roles)},
    )
    if not decision.counted or faulted is None:
        return state
    start = decision.window_start
    kept = tuple(at for at in state.counted_restarts.get(faulted.role, ()) if start is None or at > start)
    state = replace(
        state,
        counted_restarts={**state.counted_restarts, faulted.role: (*kept, now)},
        job_restarts=state.job_restarts + 1,
    )
    if decision.rule in (RULE_JOB_RETRY, RULE_UNCONDITIONAL_RETRY):
        streak = 1 if decision.healthy_before else state.unconditional_streak + 1
        state = replace(state, job_retries=state.job_retries + 1, unconditional_streak=streak)
    return state


def record_running(state: PolicyState, pod: PodRef, now: float) -> PolicyState:
    """The pod reached Running at ``now`` (kept if it was already running)."""
    counters = state.pod(pod)
    if counters.running_since is not None:
        return state
    return state.with_pod(pod, replace(counters, running_since=now))


def record_progress(state: PolicyState, pod: PodRef, now: float) -> PolicyState:
    """The pod made progress (a heartbeat step, new output): its hang count starts again from zero.

    A pod that makes progress is running, so its healthy-running clock starts too if it had not.
    """
    counters = state.pod(pod)
    updated = replace(
        counters,
        consecutive_hangs=0,
        running_since=counters.running_since if counters.running_since is not None else now,
    )
    return state if updated == counters else state.with_pod(pod, updated)
