"""Properties over random jobs and random fault sequences (hypothesis)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.policy.jobs import job, role
from trainguard.api import RestartPolicy, RestartScope, TrainingJob
from trainguard.policy import (
    Decision,
    Fault,
    FaultKind,
    PodRef,
    PolicyState,
    Remedy,
    apply_decision,
    decide,
    record_progress,
    record_running,
)

POD_FAULTS = [kind for kind in FaultKind if kind is not FaultKind.DEADLINE]


@st.composite
def jobs(draw: st.DrawFn) -> TrainingJob:
    def role_fields() -> dict[str, Any]:
        low = draw(st.integers(0, 2))
        high = draw(st.integers(max(low, 1), 4))
        fields: dict[str, Any] = {
            "minReplicas": low,
            "maxReplicas": high,
            "restartPolicy": draw(st.sampled_from(RestartPolicy)).value,
            "restartScope": draw(st.sampled_from(RestartScope)).value,
            "failPolicy": draw(st.sampled_from(["Any", "All", "Rank0", "None"])),
        }
        if draw(st.booleans()):
            fields["restartLimit"] = draw(st.integers(0, 4))
        if draw(st.booleans()):
            fields["restartTimeout"] = draw(st.integers(1, 50))
        if draw(st.booleans()):
            fields["faultTolerantPolicy"] = [
                {"exitCodes": "129,1-3", "restartScope": draw(st.sampled_from(RestartScope)).value},
                {
                    "exceptionalEvent": "nodeNotReady,hang",
                    "restartPolicy": draw(st.sampled_from(["Never", "OnNodeFail"])),
                },
            ]
        return {"replicas": draw(st.integers(low, high)), **fields}

    spec: dict[str, Any] = {"failPolicy": draw(st.sampled_from(["Any", "All", "Rank0", "None"]))}
    if draw(st.booleans()):
        spec["backoffLimit"] = draw(st.integers(0, 6))
    if draw(st.booleans()):
        spec["hang"] = {"timeoutSeconds": 10, "maxConsecutive": draw(st.integers(1, 3))}
    if draw(st.booleans()):
        spec["jobRetry"] = {"retryNum": draw(st.integers(1, 4)), "unconditional": draw(st.booleans())}
    return job({"launcher": role(**role_fields()), "worker": role(**role_fields())}, **spec)


@dataclass(frozen=True)
class Step:
    kind: FaultKind
    role: str
    index: int
    code: int
    dt: float
    progress: bool


steps = st.builds(
    Step,
    kind=st.sampled_from(POD_FAULTS),
    role=st.sampled_from(["launcher", "worker"]),
    index=st.integers(0, 3),
    code=st.sampled_from([0, 1, 2, 101, 129, 137, 143, 255]),
    dt=st.floats(0, 30, allow_nan=False),
    progress=st.booleans(),
)


def _fault(training_job: TrainingJob, step: Step, now: float) -> Fault:
    spec = training_job.spec.replica_specs[step.role]
    pod = PodRef(step.role, step.index % max(spec.max_count, 1))
    exits = step.kind in (FaultKind.EXITED, FaultKind.OOM_KILLED)
    code = (137 if step.kind is FaultKind.OOM_KILLED else step.code) if exits else None
    return Fault(step.kind, pod, now, exit_code=code)


def _replay(
    training_job: TrainingJob, sequence: list[Step]
) -> list[tuple[PolicyState, Fault, float, Decision]]:
    """Decide and apply every step until the job fails; returns (state before, fault, now, decision)."""
    state, now, seen = PolicyState(), 0.0, []
    for step in sequence:
        now += step.dt
        fault = _fault(training_job, step, now)
        assert fault.pod is not None
        if step.progress:
            state = record_running(record_progress(state, fault.pod, now), fault.pod, now)
        decision = decide(training_job, state, fault, now)
        seen.append((state, fault, now, decision))
        state = apply_decision(state, decision, now)
        if decision.action is Remedy.FAIL_JOB:
            break
    return seen


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(jobs(), st.lists(steps, max_size=40))
def test_never_a_counted_restart_past_a_limit(training_job: TrainingJob, sequence: list[Step]) -> None:
    counted: dict[str, list[float]] = {}
    total = retries = 0
    for _, fault, now, decision in _replay(training_job, sequence):
        if not (decision.action is Remedy.RESTART and decision.counted):
            continue
        assert fault.pod is not None
        role_name = fault.pod.role
        spec = training_job.spec.replica_specs[role_name]
        window = spec.restart_timeout
        inside = [at for at in counted.get(role_name, []) if window is None or at > now - window]
        if spec.restart_limit is not None:
            assert len(inside) < spec.restart_limit, decision.reason
        if training_job.spec.backoff_limit is not None:
            assert total < training_job.spec.backoff_limit
        retry = training_job.spec.job_retry
        if decision.rule == "jobRetry" and retry is not None and retry.retry_num is not None:
            assert retries < retry.retry_num
        counted.setdefault(role_name, []).append(now)
        total += 1
        retries += decision.rule in ("jobRetry", "jobUnconditionalRetry")


@SETTINGS
@given(jobs(), st.lists(steps, max_size=40))
def test_state_survives_serialization(training_job: TrainingJob, sequence: list[Step]) -> None:
    for state, fault, now, decision in _replay(training_job, sequence):
        restored = PolicyState.from_dict(json.loads(json.dumps(state.to_dict())))
        assert restored == state
        assert decide(training_job, restored, fault, now) == decision


@SETTINGS
@given(jobs(), st.lists(steps, max_size=30))
def test_decide_is_deterministic(training_job: TrainingJob, sequence: list[Step]) -> None:
    for state, fault, now, decision in _replay(training_job, sequence):
        assert decide(training_job, state, fault, now) == decision
        assert apply_decision(state, decision, now) == apply_decision(state, decision, now)


@SETTINGS
@given(jobs(), st.lists(steps, max_size=40))
def test_decisions_are_well_formed(training_job: TrainingJob, sequence: list[Step]) -> None:
    for _, fault, _, decision in _replay(training_job, sequence):
        assert decision.reason
        assert decision.rule
        restarting = decision.action in (Remedy.RESTART, Remedy.RESTART_IN_PLACE)
        assert (decision.scope is not None) is restarting
        assert not (decision.counted and not restarting)
        assert not (decision.permanent and restarting)
        assert decision.delay_seconds >= 0
        for pod in decision.pods:
            assert pod.index < training_job.spec.replica_specs[pod.role].max_count
        if restarting:
            assert fault.pod in decision.pods
        if fault.kind is FaultKind.POD_EVICTED:
            assert not decision.counted
