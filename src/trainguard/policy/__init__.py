"""trainguard.policy: every fault decided, every decision explained. Pure: no I/O, no clock, no logging.

The controller calls, for each observation: ``classify`` (is it a fault?), ``decide`` (what to do, with the
rule and the reason), carries the decision out, then ``apply_decision`` (the counters after). It tells the
policy about healthy pods with ``record_running``/``record_progress``, asks ``outcome`` whether the job has
ended, ``check_deadline``/``start_timed_out`` for the time limits, ``validate_scale`` before a scale, and
``pods_to_add`` when capacity returns to an elastic role. docs/policy.md states the semantics for users.
"""

from trainguard.policy.backoff import backoff_delay
from trainguard.policy.classify import check_deadline, classify, start_timed_out
from trainguard.policy.decide import decide, decide_success
from trainguard.policy.elastic import pods_to_add, record_grown, validate_scale
from trainguard.policy.outcome import outcome
from trainguard.policy.roles import rank0_role, resolve_role
from trainguard.policy.state import apply_decision, record_progress, record_running
from trainguard.policy.types import (
    Decision,
    Fault,
    FaultKind,
    JobOutcome,
    Observation,
    Outcome,
    PodCounters,
    PodRef,
    PolicyState,
    Remedy,
)
from trainguard.policy.whatif import what_if
from trainguard.policy.workers import torchrun_restarted

__all__ = [
    "Decision",
    "Fault",
    "FaultKind",
    "JobOutcome",
    "Observation",
    "Outcome",
    "PodCounters",
    "PodRef",
    "PolicyState",
    "Remedy",
    "apply_decision",
    "backoff_delay",
    "check_deadline",
    "classify",
    "decide",
    "decide_success",
    "outcome",
    "pods_to_add",
    "rank0_role",
    "record_grown",
    "record_progress",
    "record_running",
    "resolve_role",
    "start_timed_out",
    "torchrun_restarted",
    "validate_scale",
    "what_if",
]
