"""The words decisions are explained in; one place, so describe, explain and the history agree."""

from __future__ import annotations

from trainguard.policy.types import Fault, FaultKind


def seconds(value: float) -> str:
    return f"{value:g} s"


def times(count: int, noun: str = "restart") -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def what_happened(fault: Fault) -> str:
    """'launcher-0 exited with code 129', 'trainer-2's node n1 is NotReady', ..."""
    who = str(fault.pod) if fault.pod is not None else "the job"
    node = f" {fault.node}" if fault.node else ""
    on_node = f" on node{node}" if node else ""
    if fault.kind is FaultKind.EXITED:
        if fault.exit_code is None:
            return f"{who} failed with an unknown exit code"
        if fault.exit_code == 0:
            return f"{who} exited with code 0 (success)"
        if fault.exit_code > 128:
            return f"{who} exited with code {fault.exit_code} (killed by signal {fault.exit_code - 128})"
        return f"{who} exited with code {fault.exit_code}"
    described = {
        FaultKind.OOM_KILLED: f"{who} was OOM-killed (exit code {fault.exit_code})",
        FaultKind.NODE_NOT_READY: f"the node{node} of {who} is NotReady",
        FaultKind.POD_FORCE_DELETED: f"{who} was deleted without trainguard asking",
        FaultKind.POD_EVICTED: f"{who} was evicted or preempted",
        FaultKind.HANG: f"{who} hung (no progress)",
        FaultKind.START_TIMEOUT: f"{who} did not reach Running within its restartTimeLimit",
        FaultKind.DEADLINE: f"{who} ran past its timeLimit",
        FaultKind.HARDWARE_FAULT: f"the check of {who}'s node{node} found faulty hardware",
        FaultKind.PRE_CHECK_FAILED: f"the pre-check of {who}{on_node} failed",
        FaultKind.STRAGGLER: f"{who}{on_node} is a straggler",
    }
    text = described[fault.kind]
    return f"{text}: {fault.message}" if fault.message else text
