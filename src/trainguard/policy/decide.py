"""decide(): what to do about one fault, as a pure function of the job, the state, the fault and the time.

Order (docs/policy.md §2, Which rule decides; §4, Limits and backoff; §5, Hangs):
1. Deadline: the job fails as Timeout (rule timeLimit).
2. A pod that exited with code 0 succeeded; only restartPolicy Always runs it again.
3. Hang with hang handling on: restart in place, at most hang.maxConsecutive in a row (hang.py).
4. StartTimeout: the restart itself failed, so it is tried again (rule restartTimeLimit), scope Pod,
   counted like any restart, on another node.
5. Otherwise the first matching faultTolerantPolicy entry, the job retry, or the role's restartPolicy
   (match.py) says whether to restart and with which scope.
A restart is counted unless the fault is an eviction (evictions and hang restarts in place never count).
A counted restart first needs budget: job retries (job retries only), backoffLimit, then restartLimit
(limits.py); a job-level budget that is spent fails the job, a spent restartLimit fails the pod for good.
A pod that may not be restarted has failed for good (failure.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from trainguard.api.model import HangPolicy, ReplicaSpec, RestartPolicy, RestartScope, TrainingJob
from trainguard.policy.backoff import backoff_delay, ran_healthy
from trainguard.policy.failure import fail_pod
from trainguard.policy.hang import hang_handling, may_restart_in_place
from trainguard.policy.limits import (
    backoff_limit_spent,
    counted_in_window,
    describe_window,
    job_retry_spent,
    restart_limit_spent,
    window_start,
)
from trainguard.policy.match import Match, is_exit, match
from trainguard.policy.roles import canonical, pods_in_scope, resolve_role
from trainguard.policy.types import (
    RULE_HANG,
    RULE_RESTART_POLICY,
    RULE_RESTART_TIME_LIMIT,
    RULE_TIME_LIMIT,
    Decision,
    Fault,
    FaultKind,
    PodRef,
    PolicyState,
    Remedy,
)
from trainguard.policy.words import seconds, what_happened

#: Faults after which the pod must not come back on the node it was on.
_MOVE_OFF_NODE = frozenset(
    {
        FaultKind.NODE_NOT_READY,
        FaultKind.POD_EVICTED,
        FaultKind.START_TIMEOUT,
        FaultKind.HARDWARE_FAULT,
        FaultKind.PRE_CHECK_FAILED,
        FaultKind.STRAGGLER,
    }
)


def decide(
    job: TrainingJob,
    state: PolicyState,
    fault: Fault,
    now: float,
    alive: Mapping[str, int] | None = None,
    slots: Mapping[str, int] | None = None,
) -> Decision:
    """The decision for ``fault``.

    ``alive``: role -> pods of that role alive and healthy now, not counting the faulted pod; used for the
    minReplicas check of elastic roles (default: the role's slots that have not failed for good).
    ``slots``: role -> the role's pod slots now, shrunk ones included (a scaled role has more or fewer than
    its ``replicas``): a failPolicy is judged over them, as ``outcome`` judges the job (default: ``replicas``).
    """
    if fault.kind is FaultKind.DEADLINE:
        return Decision(
            fault,
            Remedy.FAIL_JOB,
            None,
            RULE_TIME_LIMIT,
            False,
            f"{what_happened(fault)}; the job ends as Timeout",
        )
    if fault.pod is None:
        raise ValueError(f"a {fault.kind.value} fault needs the pod it happened to")
    pod = canonical(job, fault.pod)
    fault = replace(fault, pod=pod)
    _, spec = resolve_role(job, pod.role)
    if is_exit(fault) and fault.exit_code == 0 and spec.restart_policy is not RestartPolicy.ALWAYS:
        return Decision(
            fault,
            Remedy.NONE,
            None,
            RULE_RESTART_POLICY,
            False,
            f"{what_happened(fault)}; it is done (restartPolicy {spec.restart_policy.value} "
            "reruns only failed pods)",
            pods=(pod,),
        )
    hang = hang_handling(job)
    if fault.kind is FaultKind.HANG and hang is not None:
        return _hang(job, state, fault, pod, hang, alive, slots)
    if fault.kind is FaultKind.START_TIMEOUT:
        chosen = Match(
            RULE_RESTART_TIME_LIMIT,
            True,
            RestartScope.POD,
            f"the restart itself failed (restartTimeLimit {seconds(spec.restart_time_limit or 0)}), "
            "so it is tried again, scope Pod",
        )
    else:
        chosen = match(job, spec, fault)
    if not chosen.restart:
        return fail_pod(
            job,
            state.failed_pods,
            state.failed_roles,
            fault,
            alive,
            f"{what_happened(fault)}; {chosen.why}",
            chosen.rule,
            slots=slots,
        )
    return _restart(job, state, fault, pod, spec, chosen, now, alive, slots)


def _hang(
    job: TrainingJob,
    state: PolicyState,
    fault: Fault,
    pod: PodRef,
    hang: HangPolicy,
    alive: Mapping[str, int] | None,
    slots: Mapping[str, int] | None,
) -> Decision:
    counters = state.pod(pod)
    limit = hang.max_consecutive
    if may_restart_in_place(hang, counters):
        return Decision(
            fault,
            Remedy.RESTART_IN_PLACE,
            RestartScope.POD,
            RULE_HANG,
            False,
            f"{pod} made no progress for {seconds(hang.timeout_seconds)} (hang.timeoutSeconds); hang handling "
            f"stops it and runs it again in place (hang restart {counters.consecutive_hangs + 1} of {limit} in a row); "
            "not counted toward any limit",
            pods=(pod,),
        )
    return fail_pod(
        job,
        state.failed_pods,
        state.failed_roles,
        fault,
        alive,
        f"{what_happened(fault)} again after {limit} hang restarts in a row (hang.maxConsecutive "
        f"{limit}); it fails with reason Hang",
        RULE_HANG,
        "hang.maxConsecutive",
        slots,
    )


def _restart(
    job: TrainingJob,
    state: PolicyState,
    fault: Fault,
    pod: PodRef,
    spec: ReplicaSpec,
    chosen: Match,
    now: float,
    alive: Mapping[str, int] | None,
    slots: Mapping[str, int] | None,
) -> Decision:
    counted = fault.kind is not FaultKind.POD_EVICTED
    counters = state.pod(pod)
    healthy = ran_healthy(job.spec.backoff, counters, fault.at)
    opening = f"{what_happened(fault)}; {chosen.why}"
    if counted:
        spent = (
            (job_retry_spent(job, state, healthy) if chosen.is_job_retry else None)
            or backoff_limit_spent(job, state)
            or restart_limit_spent(spec, state, pod.role, now)
        )
        if spent is not None and spent.fails_job:
            return Decision(
                fault,
                Remedy.FAIL_JOB,
                None,
                chosen.rule,
                False,
                f"{opening}, but {spent.words}; the job fails",
                pods=(pod,),
                permanent=True,
                healthy_before=healthy,
                limit=spent.limit,
            )
        if spent is not None:
            return fail_pod(
                job,
                state.failed_pods,
                state.failed_roles,
                fault,
                alive,
                f"{opening}, but {spent.words}",
                chosen.rule,
                spent.limit,
                slots,
            )
    delay = backoff_delay(job.spec.backoff, 0 if healthy else counters.backoff_streak) if counted else 0.0
    budget = _budget_words(job, state, spec, pod.role, chosen, now) if counted else ""
    counting = f"counted toward limits{budget}" if counted else "not counted toward any limit (an eviction)"
    waiting = f"; it waits {seconds(delay)} first" if delay > 0 else ""
    return Decision(
        fault,
        Remedy.RESTART,
        chosen.scope,
        chosen.rule,
        counted,
        f"{opening}; {counting}{waiting}",
        pods=pods_in_scope(job, pod, chosen.scope),
        delay_seconds=delay,
        replace_node=fault.kind in _MOVE_OFF_NODE,
        healthy_before=healthy,
        window_start=window_start(spec, now),
    )


def _budget_words(
    job: TrainingJob, state: PolicyState, spec: ReplicaSpec, role: str, chosen: Match, now: float
) -> str:
    """' (restart 3 of restartLimit 100 within 864000 s, ...)' for the budgets this restart spends."""
    parts: list[str] = []
    retry = job.spec.job_retry
    if chosen.is_job_retry and retry is not None and retry.retry_num is not None:
        parts.append(f"job retry {state.job_retries + 1} of {retry.retry_num}")
    if spec.restart_limit is not None:
        used = counted_in_window(spec, state, role, now)
        parts.append(f"restart {used + 1} of restartLimit {spec.restart_limit} {describe_window(spec)}")
    if job.spec.backoff_limit is not None:
        parts.append(f"restart {state.job_restarts + 1} of backoffLimit {job.spec.backoff_limit}")
    return f" ({', '.join(parts)})" if parts else ""


def decide_success(
    job: TrainingJob,
    state: PolicyState,
    pod: PodRef,
    at: float,
    now: float,
    alive: Mapping[str, int] | None = None,
) -> Decision:
    """The decision for a pod that exited with code 0: done, or (restartPolicy Always) run again."""
    return decide(job, state, Fault(FaultKind.EXITED, pod, at, exit_code=0), now, alive)
