"""Which rule decides a fault, and whether that rule restarts (docs/policy.md §2, Which rule decides).

Order: the role's ``faultTolerantPolicy`` (first matching entry wins and decides alone), then the job's
ModelArts-style job retry (environment faults, or any failure when unconditional), then the role's own
``restartPolicy``. Hang handling and StartTimeout come before all of this and are in decide.py.

- An ``exitCodes`` entry matches an exit (or OOM kill) with a listed code; code 0 is success and never matches.
- An ``exceptionalEvent`` entry matches nodeNotReady, PodForceDeleted, PodEvicted or hang.
- With ``faultTolerant: false`` the entries are not consulted; the restartPolicy still applies.
- Environment faults are the exceptional events and exits with a retryable code (``retryableExitCodes``).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.api.model import (
    ExceptionalEvent,
    FaultTolerantRule,
    ReplicaSpec,
    RestartPolicy,
    RestartScope,
    TrainingJob,
)
from trainguard.policy.types import (
    RULE_FAULT_TOLERANT,
    RULE_JOB_RETRY,
    RULE_RESTART_POLICY,
    RULE_UNCONDITIONAL_RETRY,
    Fault,
    FaultKind,
    rule_at,
)

EVENT_OF: dict[FaultKind, ExceptionalEvent] = {
    FaultKind.NODE_NOT_READY: ExceptionalEvent.NODE_NOT_READY,
    FaultKind.POD_FORCE_DELETED: ExceptionalEvent.POD_FORCE_DELETED,
    FaultKind.POD_EVICTED: ExceptionalEvent.POD_EVICTED,
    FaultKind.HANG: ExceptionalEvent.HANG,
}
_EXITS = frozenset({FaultKind.EXITED, FaultKind.OOM_KILLED})
_ON_EVENTS = frozenset(
    {
        RestartPolicy.ON_FAILURE,
        RestartPolicy.ALWAYS,
        RestartPolicy.ON_NODE_FAIL,
        RestartPolicy.ON_NODE_FAIL_WITH_EXIT_CODE,
    }
)


@dataclass(frozen=True)
class Match:
    """The rule that decides a fault: whether it restarts, with which scope, and why, in words."""

    rule: str
    restart: bool
    scope: RestartScope
    why: str

    @property
    def is_job_retry(self) -> bool:
        return self.rule in (RULE_JOB_RETRY, RULE_UNCONDITIONAL_RETRY)


def is_exit(fault: Fault) -> bool:
    return fault.kind in _EXITS


def is_environment_fault(job: TrainingJob, fault: Fault) -> bool:
    """Exceptional events and exits with a retryable code: what ModelArts' job retry restarts."""
    if fault.kind in EVENT_OF:
        return True
    return is_exit(fault) and fault.exit_code in job.spec.retryable_exit_codes


def match(job: TrainingJob, role: ReplicaSpec, fault: Fault) -> Match:
    """The rule that decides ``fault`` of a pod of ``role`` (not for Hang with hang handling on)."""
    if job.spec.fault_tolerant:
        for position, entry in enumerate(role.fault_tolerant_policy):
            if _entry_matches(entry, fault):
                return _by_entry(position, entry)
    retry = _by_job_retry(job, fault)
    if retry is not None:
        return retry
    if not job.spec.fault_tolerant:
        return Match(RULE_FAULT_TOLERANT, False, role.restart_scope, NOT_FAULT_TOLERANT)
    return _by_restart_policy(job, role, fault)


#: Why a job with ``faultTolerant: false`` restarts nothing (CCE: the option is needed for fault tolerance and for
#: elasticity); a ModelArts job retry or restart upon suspension, asked for by their own settings, still apply.
NOT_FAULT_TOLERANT = (
    "spec.faultTolerant is false: the roles' rules and restart policies recover nothing (CCE: fault tolerance "
    "and elasticity need it)"
)


def _entry_matches(entry: FaultTolerantRule, fault: Fault) -> bool:
    if entry.exit_codes is not None:
        return is_exit(fault) and fault.exit_code != 0 and fault.exit_code in entry.exit_codes
    event = EVENT_OF.get(fault.kind)
    return event is not None and entry.exceptional_event is not None and event in entry.exceptional_event


def _by_entry(position: int, entry: FaultTolerantRule) -> Match:
    policy = entry.effective_restart_policy
    if entry.exit_codes is not None:
        matcher = f"exitCodes {entry.exit_codes}"
    else:
        matcher = "exceptionalEvent " + ",".join(e.value for e in entry.exceptional_event or ())
    label = f"faultTolerantPolicy[{position}] ({matcher}, restartPolicy {policy.value})"
    if policy is RestartPolicy.NEVER:
        return Match(rule_at(position), False, entry.restart_scope, f"{label} does not restart it")
    return Match(
        rule_at(position),
        True,
        entry.restart_scope,
        f"{label} restarts it with scope {entry.restart_scope.value}",
    )


def _by_job_retry(job: TrainingJob, fault: Fault) -> Match | None:
    retry = job.spec.job_retry
    if retry is None or (is_exit(fault) and fault.exit_code == 0):
        return None
    if retry.retry_num is not None and is_environment_fault(job, fault):
        return Match(
            RULE_JOB_RETRY,
            True,
            RestartScope.ALL,
            f"job-retry-num {retry.retry_num} restarts the whole job for this environment fault",
        )
    if retry.unconditional:
        return Match(
            RULE_UNCONDITIONAL_RETRY,
            True,
            RestartScope.ALL,
            "job-unconditional-retry restarts the whole job for any failure",
        )
    return None


def _by_restart_policy(job: TrainingJob, role: ReplicaSpec, fault: Fault) -> Match:
    policy = role.restart_policy
    label = f"no faultTolerantPolicy entry matches; the role's restartPolicy {policy.value}"
    restart, detail = _policy_restarts(job, policy, fault)
    scope = role.restart_scope
    if restart:
        return Match(RULE_RESTART_POLICY, True, scope, f"{label} {detail}, scope {scope.value}")
    return Match(RULE_RESTART_POLICY, False, scope, f"{label} {detail}")


def _policy_restarts(job: TrainingJob, policy: RestartPolicy, fault: Fault) -> tuple[bool, str]:
    """Whether ``policy`` restarts ``fault``, and the words for it (the table of docs/policy.md §2)."""
    if policy is RestartPolicy.NEVER:
        return False, "never restarts"
    if fault.kind in EVENT_OF:
        if policy in _ON_EVENTS:
            return True, "restarts on exceptional events"
        return False, "restarts on retryable exit codes only, not on exceptional events"
    code = fault.exit_code
    if policy is RestartPolicy.ALWAYS:
        return True, "restarts on any exit"
    if code == 0:
        return False, "does not rerun a pod that succeeded"
    if policy is RestartPolicy.ON_FAILURE:
        return True, "restarts on any failure"
    if policy is RestartPolicy.ON_NODE_FAIL:
        return False, "restarts on exceptional events only, not on exits"
    retryable = job.spec.retryable_exit_codes
    if code is not None and code in retryable:
        return True, f"retries code {code} (retryable: {retryable})"
    shown = "an unknown code" if code is None else f"code {code}"
    return False, f"does not retry {shown} (retryable: {retryable})"
