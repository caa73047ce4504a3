"""Hot spares (``trainguard.io/live-spares``): spare workers each pod of a live job keeps beside its workers,
warm (the interpreter, ``import torch``, the model built, the warm-up run) and holding no rank; when a worker
fails, its pod's launcher calls a spare in its place at once and starts the failed worker's slot again as the
next spare (``trainguard.pod.livelaunch``, ``trainguard.sdk._spare``).

A spare is a process in the pod, in a slot of its own after the pod's workers (``LOCAL_RANK`` ``nproc`` on):
on a GPU it holds a device of its own, as a worker does, so the pod asks for ``nproc + spares`` devices; on the
CPU it holds the memory of a worker's process. The engine decides here what a job may have (``live_spares``)
and keeps what each pod's agent says of its spares (``record_spares``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainguard.api import TrainingJob
from trainguard.controller.agent_options import GPU_RESOURCE, gpu_count
from trainguard.controller.torchrun_command import LIVE_ANNOTATION, LaunchError, asks_for_live, torchrun_roles
from trainguard.pod import contract

if TYPE_CHECKING:  # the cycle's module imports the launch's, which imports this one
    from trainguard.controller.cycle import Cycle

LIVE_SPARES_ANNOTATION = "trainguard.io/live-spares"
#: The most spares a pod may keep.
MAX_LIVE_SPARES = 8


def live_spares(job: TrainingJob) -> int:
    """The hot spares each pod of the job's torchrun roles keeps (``LIVE_SPARES_ANNOTATION``; 0 without it).
    ``LaunchError`` for a value that is not 0 to ``MAX_LIVE_SPARES``, for spares without live mode, and for
    more spares than a pod's GPUs leave: each spare holds a device of its own, as each worker does."""
    text = job.metadata.annotations.get(LIVE_SPARES_ANNOTATION)
    if text is None:
        return 0
    field = f"metadata.annotations[{LIVE_SPARES_ANNOTATION}]"
    if not text.strip().isdigit() or int(text) > MAX_LIVE_SPARES:
        raise LaunchError(
            f"{field}: {text!r} is not a number of spare workers per pod; give a whole number from 0 to "
            f"{MAX_LIVE_SPARES}"
        )
    spares = int(text)
    if spares and not asks_for_live(job):
        raise LaunchError(
            f"{field}: spares wait to take a failed worker's place in live mode, which this job does not ask for; "
            f'add the annotation {LIVE_ANNOTATION}: "true" (its script uses trainguard.Live), or remove {field}'
        )
    per_node = job.spec.elastic.n_proc_per_node if job.spec.elastic else 1
    for role in torchrun_roles(job) if spares else ():
        devices = gpu_count(job.role(role).template)
        nproc = per_node if isinstance(per_node, int) else devices  # "gpu", "auto": one worker per device
        if devices and nproc + spares > devices:
            raise LaunchError(
                f"{field}: {spares} spare{'s' if spares > 1 else ''} and {nproc} worker{'s' if nproc > 1 else ''} "
                f"per pod need {nproc + spares} GPUs, each on a device of its own, and the pods of "
                f"replicaSpecs.{role} ask for {devices} {GPU_RESOURCE}; ask for {nproc + spares}, or give at "
                f"most {max(devices - nproc, 0)} spare{'s' if devices - nproc != 1 else ''}"
            )
    return spares


def spares_env(job: TrainingJob) -> dict[str, str]:
    """What the live launcher of each pod of the job's torchrun roles is told of its spares."""
    spares = live_spares(job)
    return {contract.ENV_LIVE_SPARES: str(spares)} if spares else {}


def record_spares(cycle: Cycle) -> None:
    """A live pod's hot spares ready now, as its agent last said (``PodStatus.spares``)."""
    for pod in cycle.observed.pods:
        slot = cycle.slots.get(pod.name)
        if slot is None or slot.generation != pod.generation or pod.agent is None or pod.agent.spares is None:
            continue
        if slot.spares != pod.agent.spares.ready:
            cycle.put(slot, spares=pod.agent.spares.ready)
