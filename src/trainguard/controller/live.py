"""Live re-formations (``trainguard.Live``, a job with ``trainguard.io/live: "true"``): recorded, never decided.

The workers of a live job re-form their process group by themselves when a peer dies or the job is resized:
no pod ends and nothing is restarted. Each member of a round writes it down for its pod's agent
(``trainguard.pod.workerevents``), which reports it; its pod's summary keeps one entry per round
(``AgentReport.live_rounds``). Every pod of the round reports it, so a round is recorded once per job, by its
number: the status keeps the highest round recorded (``live_round``), and only rounds above it are new. Each
new round becomes a ``reformed`` history entry (``Reformation``: the round, its size, the agreed step, where
the state came from, what ended the previous round, how long it took) with a Normal ``LiveReformed`` Event.
The pods' agents report at their own pace, so what pods report of a round after it was recorded fills in
what its entry lacks (a newcomer's pod that says the state came from a peer, a cause), even once later rounds
were recorded.
Round 1 is the job's first formation, no re-formation: it is not recorded. Nothing is counted: the restart
counts stay as they are.

A worker that ended before it formed any round (``AgentReport.live_unused``) says that the job's script does
not use ``trainguard.Live``: the pod runs under torchrun's agent instead, as without live mode. The job gets
one Warning Event ``LiveModeUnused`` that says so and what to do (``live_unused_warned`` remembers it).
A job that asks for live mode but whose containers set NCCL's error handling to a mode that ends the survivors of
a fault runs without it (``torchrun_command.live_refusal``): one Warning Event ``LiveModeOff`` says why.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from trainguard.controller.backend import EventType
from trainguard.controller.cycle import Cycle
from trainguard.controller.reports import LiveRound
from trainguard.controller.status import (
    HistoryEntry,
    HistoryKind,
    LiveOrigin,
    Reformation,
    ReformCause,
    ScaleOperation,
)
from trainguard.controller.torchrun_command import LIVE_ANNOTATION, asks_for_live, live_refusal
from trainguard.policy.types import Remedy

T = TypeVar("T")
#: The job's first formation: its start, not a re-formation.
FIRST_ROUND = 1


def record_live_rounds(cycle: Cycle) -> None:
    """Record the rounds the pods' agents report that are newer than the status's ``live_round``, each once,
    in order; warn once when a pod's workers do not use live mode."""
    recorded: int = cycle.get("live_round")
    reports: dict[int, list[LiveRound]] = {}
    unused: str | None = None
    for pod in cycle.observed.pods:
        agent = pod.agent
        if agent is None:
            continue
        if agent.live_unused and unused is None:
            unused = pod.name
        for live_round in agent.live_rounds:
            reports.setdefault(live_round.round, []).append(live_round)
    heard = {number: reports.pop(number) for number in sorted(reports) if number <= recorded}
    if heard:
        _complete(cycle, [_reformation(rounds) for rounds in heard.values()])
    for number in sorted(reports):
        if number > FIRST_ROUND:
            at = _at(reports[number])
            _record(cycle, _explained(cycle, _reformation(reports[number]), at), at)
    if reports:
        cycle.updates["live_round"] = max(reports)
    if unused is not None and not cycle.get("live_unused_warned"):
        cycle.updates["live_unused_warned"] = True
        cycle.emit(EventType.WARNING, "LiveModeUnused", _unused_words(unused))
    refused = live_refusal(cycle.job) if asks_for_live(cycle.job) else None
    if refused is not None and not cycle.get("live_off_warned"):
        cycle.updates["live_off_warned"] = True
        cycle.emit(
            EventType.WARNING,
            "LiveModeOff",
            f'the job asks for live mode (annotation {LIVE_ANNOTATION}: "true") and runs without it, its workers '
            f"under torchrun's elastic agent: {refused}",
        )


def _representative(reports: Sequence[LiveRound]) -> LiveRound:
    """Rank 0's word on the round if a pod gave it, else the first one that names a cause, else the first."""
    for report in reports:
        if report.rank == 0:
            return report
    return next((report for report in reports if report.cause is not None), reports[0])


def _reformation(reports: Sequence[LiveRound]) -> Reformation:
    chosen = _representative(reports)
    origins = [report.origin for report in reports if report.origin is not None]
    if LiveOrigin.PEER in origins:
        origin = LiveOrigin.PEER
    else:
        origin = next((o for o in origins if o is not LiveOrigin.LIVE), LiveOrigin.LIVE)
    return Reformation(
        round=chosen.round,
        world_size=_first([chosen.world_size, *(report.world_size for report in reports)]),
        step=_first([chosen.step, *(report.step for report in reports)]),
        origin=origin,
        cause=_first([chosen.cause, *(report.cause for report in reports)]),
        seconds=chosen.seconds,
    )


def _first(values: Iterable[T | None]) -> T | None:
    """The first value given (rank 0's, else another member's)."""
    return next((value for value in values if value is not None), None)


def _complete(cycle: Cycle, heard: Sequence[Reformation]) -> None:
    """What the pods reported of rounds already recorded fills in their entries: a newcomer's pod may report
    after the survivors' (its ``peer``), a survivor's after a newcomer's (the cause), even once later rounds
    were recorded (an agent that reports late on a busy machine). Only what an entry lacks is filled in, so an
    entry never goes back on what it said; a round reported after a newer one was recorded, and so never
    recorded itself, stays unrecorded."""
    entries = {
        entry.reformation.round: (position, entry, entry.reformation)
        for position, entry in enumerate(cycle.history)
        if entry.kind is HistoryKind.REFORMED and entry.reformation is not None
    }
    for reformation in heard:
        if reformation.round not in entries:
            continue
        position, entry, known = entries[reformation.round]
        recorded = known
        if known.after is None:  # a fault reported after its round was recorded (another pod's agent)
            known = _explained(cycle, known, entry.at)
        merged = known.model_copy(
            update={
                "origin": max(known.origin, reformation.origin, key=_ORIGIN_RANK.__getitem__),
                "world_size": _first([known.world_size, reformation.world_size]),
                "step": _first([known.step, reformation.step]),
                "cause": _first([known.cause, reformation.cause]),
                "seconds": _first([known.seconds, reformation.seconds]),
            }
        )
        if merged != recorded:
            cycle.history[position] = entry.model_copy(
                update={"reformation": merged, "reason": describe(merged)}
            )


#: Which origin an entry says when its reports differ: a state received from a peer says the most.
_ORIGIN_RANK = {
    LiveOrigin.LIVE: 0,
    LiveOrigin.FRESH: 1,
    LiveOrigin.MEMORY: 1,
    LiveOrigin.DISK: 1,
    LiveOrigin.PEER: 2,
}


def _at(reports: Sequence[LiveRound]) -> float:
    """When the round formed: the earliest member's word on it."""
    return min(report.at for report in reports)


def _record(cycle: Cycle, reformation: Reformation, at: float) -> None:
    reason = describe(reformation)
    cycle.record(
        HistoryEntry(
            at=at,
            kind=HistoryKind.REFORMED,
            action=Remedy.NONE,
            reason=reason,
            reformation=reformation,
        )
    )
    cycle.emit(EventType.NORMAL, "LiveReformed", reason)


#: How long after a round's forming an entry of what caused it may be dated (the agents' and the engine's
#: clocks, a fault reported with the time the worker ended).
_SLACK_S = 2.0
#: The entries whose pods made a round: scale steps by what they did to the role.
_SCALES = {HistoryKind.SCALE, HistoryKind.GROW, HistoryKind.SCALE_TIMEOUT}


def _explained(cycle: Cycle, reformation: Reformation, at: float) -> Reformation:
    """The round with what made it, from the engine's own history between the previous round and this one,
    whatever order the entries were recorded in (a pod's agent may report a fault after its round): the latest
    scale step, else the faults of pods, else newcomers when the world grew. Typed fields, decided here; the
    words follow from them."""
    previous = max(
        (e for e in cycle.history if e.kind is HistoryKind.REFORMED and e.reformation is not None
         and e.reformation.round < reformation.round),
        key=lambda e: e.reformation.round if e.reformation is not None else 0,
        default=None,
    )  # fmt: skip
    since = previous.at if previous is not None else (cycle.get("started_at") or 0.0)
    world_before = previous.reformation.world_size if previous is not None and previous.reformation else None
    window = [
        e for e in cycle.history if since < e.at <= at + _SLACK_S and e.kind is not HistoryKind.REFORMED
    ]
    scale = next((e for e in reversed(window) if e.kind in _SCALES and e.pods), None)
    faults = _unique(e.pod for e in window if e.kind is HistoryKind.FAULT and e.pod)
    after: ReformCause | None
    pods: tuple[str, ...] = ()
    if scale is not None:
        after = ReformCause.SCALE_OUT if scale.action is ScaleOperation.SCALE_OUT else ReformCause.SCALE_IN
        pods = scale.pods
    elif faults:
        after, pods = ReformCause.FAULT, faults
    elif world_before is not None and (reformation.world_size or 0) > world_before:
        after = ReformCause.JOINED
    else:
        after = None
    return reformation.model_copy(update={"after": after, "after_pods": pods, "world_before": world_before})


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def describe(reformation: Reformation) -> str:
    """The words of a ``reformed`` entry (its reason, and its Event's message), from its typed fields: what made
    the round in the job's terms (the pods that failed, a scale step's pods), never an exception's text."""
    took = f" in {reformation.seconds:.2f} s" if reformation.seconds is not None else ""
    after = after_words(reformation.after, reformation.after_pods)
    size = reformation.world_size
    members = "" if size is None else f"{size} worker{'' if size == 1 else 's'}"
    at_step = "" if reformation.step is None else f" at step {reformation.step}"
    what = ", ".join(part for part in (f"{members}{at_step}".strip(), _state_words(reformation)) if part)
    return (
        f"the job's workers re-formed live as round {reformation.round}{took}{after}: {what}; nothing was "
        "restarted or counted"
    )


def after_words(after: ReformCause | None, pods: Sequence[str]) -> str:
    """`` after ...``: what made a round, as a person says it (empty when nothing the engine saw explains it)."""
    named = _names(pods)
    return {
        ReformCause.FAULT: f" after {named} failed" if named else " after a member failed",
        ReformCause.SCALE_IN: f" after the scale-in that removed {named}",
        ReformCause.SCALE_OUT: f" after the scale-out that added {named}",
        ReformCause.JOINED: " as newcomers joined (replacements of members that failed)",
    }.get(after, "") if after is not None else ""  # fmt: skip


def _names(pods: Sequence[str]) -> str:
    if len(pods) <= 1:
        return "".join(pods)
    return f"{', '.join(pods[:-1])} and {pods[-1]}"


def _state_words(reformation: Reformation) -> str:
    if reformation.origin is LiveOrigin.LIVE:
        return "every member kept its own state"
    if reformation.origin is LiveOrigin.PEER:
        grew = (
            reformation.world_before is not None and (reformation.world_size or 0) > reformation.world_before
        )
        if grew or reformation.after in (ReformCause.SCALE_OUT, ReformCause.JOINED):
            return "the newcomers received the state from a member that held it"
        if reformation.after in (ReformCause.FAULT, ReformCause.SCALE_IN):  # nobody new: a step cut short
            return "a member one step behind received the state from one that had applied that step"
        return "the members that lacked the state received it from one that held it"
    if reformation.origin is LiveOrigin.FRESH:
        return "a fresh state (nobody held one)"
    return f"the state restored from {reformation.origin} (nobody held one)"


def _unused_words(pod: str) -> str:
    return (
        f'the job asks for live mode (annotation {LIVE_ANNOTATION}: "true") but its script does not use '
        f"trainguard.Live: a worker of {pod} ended before it formed any live round, so the job's workers run "
        "under torchrun's elastic agent, as without live mode (a failed worker restarts every worker of its "
        "pod). To fix it, use trainguard.Live in the script (see docs/sdk.md), or remove the annotation"
    )
