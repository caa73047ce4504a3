"""What a pod's agent reports, as the controller reads it: its summary of the pod (``trainguard.pod.summary``)
folded into typed fields, with the restarts in place the controller has answered."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.controller.status import LiveOrigin
from trainguard.pod import summary as summaries
from trainguard.pod.checks import CheckResult
from trainguard.pod.summary import RankEntry


@dataclass(frozen=True)
class WorkerRestart:
    """torchrun restarted failed workers inside the pod, within its ``--max-restarts``: no pod ended."""

    #: When torchrun found the failure (wall clock).
    at: float
    #: The first failed worker's (128+N when killed by signal N).
    exit_code: int
    #: Its global rank.
    rank: int | None = None
    #: How many of the pod's workers had failed.
    failed: int = 1
    restarts_left: int | None = None
    max_restarts: int | None = None
    #: A live pod's hot spare took the failed worker's place.
    spare: bool = False


@dataclass(frozen=True)
class LiveRound:
    """A round that the live workers (``trainguard.Live``) of a pod formed in their own processes, as one of
    them (rank 0 when it is in the pod) wrote it down."""

    #: When it formed (wall clock).
    at: float
    round: int
    world_size: int | None = None
    #: The step every member agreed on.
    step: int | None = None
    #: Where this worker's state came from (None: a word the controller does not know).
    origin: LiveOrigin | None = None
    rank: int | None = None
    #: From the failure (or the worker's start) to its state in place.
    seconds: float | None = None
    #: What ended the previous round (the exception's type and first line); None for a worker's first.
    cause: str | None = None


@dataclass(frozen=True)
class AgentReport:
    """The latest word of the agent inside a pod."""

    #: Restarts in place the agent has carried out in this incarnation of the pod.
    in_place_restarts: int = 0
    #: No progress for ``hang.timeoutSeconds`` (heartbeats, else log output, else CPU activity).
    hung: bool = False
    #: When the training process last made progress, on the controller's clock.
    last_progress_at: float | None = None
    #: Every restart of workers inside this incarnation of the pod, oldest first (none that followed a
    #: nudge: the agent killed those workers on purpose and leaves them out).
    worker_restarts: tuple[WorkerRestart, ...] = ()
    #: The number of the first of ``worker_restarts`` (the agent keeps only the latest ones and says how many
    #: came before them).
    worker_restarts_from: int = 0
    #: The latest rounds the pod's live workers formed, one per round, oldest first.
    live_rounds: tuple[LiveRound, ...] = ()
    #: How many rounds the agent dropped before ``live_rounds``.
    live_rounds_from: int = 0
    #: A worker of the pod ended before it formed any round: the job's script does not use live mode.
    live_unused: bool = False
    #: The latest fault tolerance check of the pod's node, and the latest that failed (``pod.checks``).
    last_check: CheckResult | None = None
    failed_check: CheckResult | None = None
    #: Each of the pod's ranks' work per step (what finds stragglers), as the pod's summary keeps it.
    ranks: tuple[RankEntry, ...] = ()
    #: Detection only: the agent suspects a hang now (signal, idle seconds); None when it does not.
    suspected_hang: summaries.SuspectedHang | None = None
    #: A live pod's hot spares (ready of wanted); None for a pod without.
    spares: summaries.Spares | None = None

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any], answered: int) -> AgentReport:
        """The agent's summary of its pod (``trainguard.pod.summary``: folded from its report file, or as
        the operator took it) with the restarts in place the controller has answered, on every backend.

        The agent restarts a hung command by itself, at once; the controller decides about each hang too (it
        counts and records them). So a hang stays ``hung`` until the controller has answered it with a
        ``RestartInPlace``, and only answered restarts count as done."""
        seen = summaries.read(summary)
        return cls(
            in_place_restarts=min(seen.in_place_restarts, answered),
            hung=seen.hangs > answered,
            last_progress_at=seen.last_progress_at,
            worker_restarts=tuple(
                WorkerRestart(
                    at=item.at,
                    exit_code=item.exit_code,
                    rank=item.rank,
                    failed=item.failed,
                    restarts_left=item.restarts_left,
                    max_restarts=item.max_restarts,
                    spare=item.spare,
                )
                for item in seen.worker_restarts
            ),
            worker_restarts_from=seen.worker_restarts_from,
            live_rounds=tuple(
                LiveRound(
                    at=item.at,
                    round=item.round,
                    world_size=item.world_size,
                    step=item.step,
                    origin=_origin(item.origin),
                    rank=item.rank,
                    seconds=item.seconds,
                    cause=item.cause,
                )
                for item in seen.live_rounds
            ),
            live_rounds_from=seen.live_rounds_from,
            live_unused=seen.live_unused,
            last_check=seen.last_check,
            failed_check=seen.failed_check,
            ranks=seen.ranks,
            suspected_hang=seen.suspected_hang,
            spares=seen.spares,
        )


def _origin(word: object) -> LiveOrigin | None:
    try:
        return LiveOrigin(word)
    except ValueError:
        return None
