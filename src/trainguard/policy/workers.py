"""Restarts that torchrun already carried out inside a pod, put into the policy's words.

torchrun's elastic agent restarts a pod's failed workers by itself while its ``--max-restarts`` lasts; the
pod never ends, so no rule of the job decides anything. The decision only says what happened, for the
history and the Events: rule ``torchrun``, remedy ``restart-workers``, not counted toward any limit of the job
(torchrun spends its own budget), nothing for the controller to carry out.
"""

from __future__ import annotations

from trainguard.policy.types import RULE_TORCHRUN, Decision, Fault, Remedy
from trainguard.policy.words import what_happened


def torchrun_restarted(
    fault: Fault,
    failed: int = 1,
    restarts_left: int | None = None,
    max_restarts: int | None = None,
    *,
    spare: bool = False,
) -> Decision:
    """The decision that records a restart of ``failed`` workers of ``fault.pod`` by torchrun (or by live
    mode's launcher, which called a hot spare in the failed worker's place where ``spare``)."""
    which = "a worker" if failed == 1 else f"{failed} workers"
    budget = ""
    if restarts_left is not None and max_restarts is not None:
        budget = f" ({restarts_left} of its --max-restarts {max_restarts} left)"
    done = (
        "the pod's hot spare took its place, warm, and the worker's slot started again as a spare"
        if spare
        else "torchrun restarted the pod's workers inside the pod"
    )
    return Decision(
        fault,
        Remedy.RESTART_WORKERS,
        None,
        RULE_TORCHRUN,
        False,
        f"{what_happened(fault)} ({which} of the pod); {done}{budget}; not counted toward the job's limits",
        pods=(fault.pod,) if fault.pod is not None else (),
    )
