"""One fold of the agent's report events (``trainguard.agent.report``) into a summary of its pod.

Every runtime learns what happened inside a pod from this summary, folded by this module alone: the local
runtime folds the lines of each pod's report file (``trainguard.backends.local.reports``); the agent's
``Upstream`` folds its events as they come and POSTs the part in ``WIRE`` to the operator, which checks it
with ``parse`` (``trainguard.backends.k8s.agentreports``). Both backends hand the summary to the controller as
``AgentReport.from_summary`` reads it.

The summary is a JSON object:

- ``attempt``: the latest start of the command (1 for the first; 0 before any).
- ``hangs``: hangs detected; ``inPlaceRestarts``: hung commands stopped and run again.
- ``spares``: a live pod's hot spares, ``ready`` (warm, waiting to be called) of ``wanted``; None without spares.
- ``suspectedHang``: report-only detection (``--report-only``) suspects a hang now: ``signal`` (the one that
  went quiet last) and ``idleSeconds``; None when it does not (progress resumed, or none ever suspected).
- ``workerRestarts``: the latest ``KEPT`` restarts of failed workers by torchrun inside the command, oldest
  first (``at``, ``exitCode`` and ``rank`` of the first failed worker with an exit code, ``failed``,
  ``restartsLeft``, ``maxRestarts``, and ``spare``: true where a live pod's hot spare took the failed worker's
  place), and ``workerRestartsFrom``, the number of the first one kept. Workers
  the agent killed for a nudge are never among them (its events leave them out).
- ``liveRounds``: the latest ``KEPT`` rounds the pod's live workers (``trainguard.Live``) formed, oldest first,
  one per round (every worker of the pod writes each round down: the one of rank 0 is kept if it is among
  them, else the first): ``at``, ``round``, ``worldSize``, ``step``, ``origin``, ``rank``, ``seconds``,
  ``cause``; and ``liveRoundsFrom``, how many were dropped before them. ``liveUnused``: a worker of the pod
  ended before it formed any round (the script does not use ``trainguard.Live``).
- ``checks``: fault tolerance checks the agent ran (``trainguard.pod.checks``); ``lastCheck``, the latest, and
  ``failedCheck``, the latest whose verdict was hardware or environment (``CheckResult.as_dict``).
- ``ranks``: each rank's own work per step, as the agent last measured it (``rank``, ``steps``,
  ``busySeconds``, ``stepSeconds``: the step's wall time; ``trainguard.agent.rankwork``), for finding stragglers.
- ``agentMissing``: why trainguard's agent cannot run in the pod's image (no python3 it can use), in words;
  None where it runs. Sent in the agent's place by ``trainguard-entry``, which then runs the command as written.
- Kept for the local runtime, never sent (the operator has them from the pod itself, and progress would be
  a POST a second): ``startedAt`` (the first start, wall clock), ``pid`` (the command's latest process),
  ``lastProgressAt``, and once the agent ended (``exited``): ``exitCode``, ``signal`` (its number) and
  ``reason`` ("OOMKilled", "Hang", ...).

The summary only grows, so a POST that is lost is made good by the next one.

Standard library only, Python 3.8: it runs in users' images from the bundle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.pod import contract
from trainguard.pod import summaryfields as checked
from trainguard.pod.checks import CheckResult

#: Worker restarts (and live rounds) kept in a summary (the pod's annotation stays small; the controller has
#: the older ones).
KEPT = 16
#: What the agent sends to the operator.
WIRE = (
    "attempt",
    "hangs",
    "inPlaceRestarts",
    "workerRestarts",
    "workerRestartsFrom",
    "liveRounds",
    "liveRoundsFrom",
    "liveUnused",
    "checks",
    "lastCheck",
    "failedCheck",
    "ranks",
    "suspectedHang",
    "spares",
    "agentMissing",
)
#: At most this many worker restarts (and live rounds) are taken from a summary sent to the operator.
_TAKEN = 32
_COUNTS = ("attempt", "hangs", "inPlaceRestarts", "workerRestartsFrom", "liveRoundsFrom", "checks")
_RESTART_FIELDS = ("rank", "failed", "restartsLeft", "maxRestarts")


@dataclass(frozen=True)
class RestartEntry:
    """One of ``workerRestarts``: torchrun restarted failed workers inside the pod."""

    at: float
    exit_code: int
    rank: int | None
    failed: int
    restarts_left: int | None
    max_restarts: int | None
    #: A live pod's hot spare took the failed worker's place (its slot started again as a spare).
    spare: bool = False


@dataclass(frozen=True)
class RoundEntry:
    """One of ``liveRounds``: a round the pod's live workers formed."""

    at: float
    round: int
    world_size: int | None
    step: int | None
    origin: str | None
    rank: int | None
    seconds: float | None
    cause: str | None


@dataclass(frozen=True)
class RankEntry:
    """One of ``ranks``: a rank's own work per step over its latest ``steps`` steps."""

    rank: int
    steps: int
    busy_seconds: float
    step_seconds: float = 0.0


@dataclass(frozen=True)
class Spares:
    """``spares``: a live pod's hot spares ready of those it keeps."""

    ready: int
    wanted: int


@dataclass(frozen=True)
class SuspectedHang:
    """``suspectedHang``: report-only detection suspects a hang (nothing is stopped)."""

    signal: str
    idle_seconds: float


@dataclass(frozen=True)
class Summary:
    """A summary as the backends and the controller read it (``read``): the JSON object's fields, typed."""

    attempt: int
    hangs: int
    in_place_restarts: int
    worker_restarts: tuple[RestartEntry, ...]
    worker_restarts_from: int
    live_rounds: tuple[RoundEntry, ...]
    live_rounds_from: int
    live_unused: bool
    checks: int = 0
    last_check: CheckResult | None = None
    failed_check: CheckResult | None = None
    ranks: tuple[RankEntry, ...] = ()
    suspected_hang: SuspectedHang | None = None
    spares: Spares | None = None
    agent_missing: str | None = None
    #: Kept for the local runtime only (absent from what the operator receives).
    started_at: float | None = None
    pid: int | None = None
    last_progress_at: float | None = None
    exited: bool = False
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None


def read(summary: Mapping[str, Any]) -> Summary:
    """A summary (``new``, ``summarize`` or ``parse``'s) as typed fields; those a summary cut to ``WIRE``
    lacks are None."""
    return Summary(
        attempt=summary["attempt"],
        hangs=summary["hangs"],
        in_place_restarts=summary["inPlaceRestarts"],
        worker_restarts=tuple(
            RestartEntry(
                at=item["at"],
                exit_code=item["exitCode"],
                rank=item.get("rank"),
                failed=item.get("failed") or 1,
                restarts_left=item.get("restartsLeft"),
                max_restarts=item.get("maxRestarts"),
                spare=item.get("spare") is True,
            )
            for item in summary["workerRestarts"]
        ),
        worker_restarts_from=summary["workerRestartsFrom"],
        live_rounds=tuple(
            RoundEntry(
                at=item["at"],
                round=item["round"],
                world_size=item.get("worldSize"),
                step=item.get("step"),
                origin=item.get("origin"),
                rank=item.get("rank"),
                seconds=item.get("seconds"),
                cause=item.get("cause"),
            )
            for item in summary.get("liveRounds", ())
        ),
        live_rounds_from=summary.get("liveRoundsFrom", 0),
        live_unused=summary.get("liveUnused", False),
        checks=summary.get("checks", 0),
        last_check=_check(summary.get("lastCheck")),
        failed_check=_check(summary.get("failedCheck")),
        ranks=tuple(
            RankEntry(item["rank"], item["steps"], item["busySeconds"], item.get("stepSeconds", 0.0))
            for item in summary.get("ranks") or ()
        ),
        suspected_hang=_suspected(summary.get("suspectedHang")),
        spares=_spares(summary.get("spares")),
        agent_missing=_missing(summary.get("agentMissing")),
        started_at=summary.get("startedAt"),
        pid=summary.get("pid"),
        last_progress_at=summary.get("lastProgressAt"),
        exited=summary.get("exited", False),
        exit_code=summary.get("exitCode"),
        signal=summary.get("signal"),
        reason=summary.get("reason"),
    )


def new() -> dict[str, Any]:
    """The summary of a pod whose agent has said nothing yet."""
    return {
        "attempt": 0,
        "hangs": 0,
        "inPlaceRestarts": 0,
        "workerRestarts": [],
        "workerRestartsFrom": 0,
        "liveRounds": [],
        "liveRoundsFrom": 0,
        "liveUnused": False,
        "checks": 0,
        "lastCheck": None,
        "failedCheck": None,
        "ranks": [],
        "suspectedHang": None,
        "spares": None,
        "agentMissing": None,
        "startedAt": None,
        "pid": None,
        "lastProgressAt": None,
        "exited": False,
        "exitCode": None,
        "signal": None,
        "reason": None,
    }


def summarize(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The summary of a report's events, in order."""
    summary = new()
    for record in records:
        fold(summary, record)
    return summary


def fold(summary: dict[str, Any], record: dict[str, Any]) -> bool:
    """Add one report event to ``summary``; True when its ``WIRE`` part changed."""
    event = record.get("event")
    at = checked.number(record.get("time"))
    if event == contract.REPORT_STARTED:
        summary["attempt"] = checked.integer(record.get("attempt")) or summary["attempt"] + 1
        if summary["startedAt"] is None:
            summary["startedAt"] = at
        summary["pid"] = checked.integer(record.get("pid")) or summary["pid"]
        return True
    if event == contract.REPORT_PROGRESS:
        if at is not None:
            summary["lastProgressAt"] = at
        return False
    if event == contract.REPORT_HANG:
        summary["hangs"] += 1
        return True
    if event == contract.REPORT_SUSPECTED_HANG:
        signal_name, idle = record.get("signal"), checked.number(record.get("idle_seconds"))
        if not isinstance(signal_name, str) or idle is None:
            return False
        summary["suspectedHang"] = {"signal": signal_name, "idleSeconds": idle}
        return True
    if event == contract.REPORT_SPARES:
        spares = _spares({"ready": record.get("ready"), "wanted": record.get("wanted")})
        if spares is None:
            return False
        changed = summary.get("spares") != {"ready": spares.ready, "wanted": spares.wanted}
        summary["spares"] = {"ready": spares.ready, "wanted": spares.wanted}
        return changed
    if event == contract.REPORT_SUSPICION_CLEARED:
        changed = summary.get("suspectedHang") is not None
        summary["suspectedHang"] = None
        return changed
    if event == contract.REPORT_RESTART_IN_PLACE:
        summary["inPlaceRestarts"] += 1
        summary["pid"] = checked.integer(record.get("pid")) or summary["pid"]
        return True
    if event == contract.REPORT_WORKERS_RESTARTED:
        restart = checked.worker_restart(record)
        if restart is None:
            return False
        kept = [*summary["workerRestarts"], restart]
        dropped = max(len(kept) - KEPT, 0)
        summary["workerRestarts"] = kept[dropped:]
        summary["workerRestartsFrom"] += dropped
        return True
    if event == contract.REPORT_LIVE_REFORMED:
        return _fold_live_round(summary, record)
    if event == contract.REPORT_LIVE_UNUSED:
        changed = not summary["liveUnused"]
        summary["liveUnused"] = True
        return changed
    if event == contract.REPORT_CHECKED:
        result = _check(record.get("check"))
        if result is None:
            return False
        summary["checks"] += 1
        summary["lastCheck"] = result.as_dict()
        if result.failed:
            summary["failedCheck"] = summary["lastCheck"]
        return True
    if event == contract.REPORT_RANKS:
        ranks = checked.ranks(record.get("ranks"))
        changed = bool(ranks != summary["ranks"])
        summary["ranks"] = ranks
        return changed
    if event in (contract.REPORT_EXITED, contract.REPORT_GAVE_UP):
        reason = record.get("reason")
        summary.update(
            exited=True,
            exitCode=checked.integer(record.get("exit_code")),
            signal=checked.signal_number(record.get("signal")),
            reason=reason if isinstance(reason, str) else None,
        )
        if record.get("oom") is True:
            summary["reason"] = "OOMKilled"
        if event == contract.REPORT_GAVE_UP:
            summary["reason"] = summary["reason"] or contract.REASON_HANG
    return False


def wire(summary: dict[str, Any]) -> dict[str, Any]:
    """The part of ``summary`` the agent sends to the operator."""
    return {key: summary[key] for key in WIRE}


def parse(value: object) -> dict[str, Any] | None:
    """A summary as the operator received it, cut to ``WIRE``, each field of its type; None when it is no
    summary at all. Entries of ``workerRestarts`` without a time or an exit code, and of ``liveRounds``
    without a time or a round, are dropped, and only the latest ``_TAKEN`` of each are kept."""
    if not isinstance(value, dict):
        return None
    parsed: dict[str, Any] = {key: checked.count(value.get(key)) for key in _COUNTS}
    restarts = []
    for item in value.get("workerRestarts") or []:
        if not isinstance(item, dict):
            continue
        at, code = checked.number(item.get("at")), checked.integer(item.get("exitCode"))
        if at is None or code is None:
            continue
        fields = {key: item[key] for key in _RESTART_FIELDS if checked.integer(item.get(key)) is not None}
        restarts.append(
            {"at": at, "exitCode": code, **fields, **({"spare": True} if item.get("spare") is True else {})}
        )
    dropped = max(len(restarts) - _TAKEN, 0)
    parsed["workerRestartsFrom"] += dropped
    parsed["workerRestarts"] = restarts[dropped:]
    rounds = [
        entry
        for entry in (
            checked.round_entry(item) for item in value.get("liveRounds") or [] if isinstance(item, dict)
        )
        if entry is not None
    ]
    dropped = max(len(rounds) - _TAKEN, 0)
    parsed["liveRoundsFrom"] += dropped
    parsed["liveRounds"] = rounds[dropped:]
    parsed["liveUnused"] = value.get("liveUnused") is True
    for key in ("lastCheck", "failedCheck"):
        result = _check(value.get(key))
        parsed[key] = None if result is None else result.as_dict()
    parsed["ranks"] = checked.ranks(value.get("ranks"))
    suspected = _suspected(value.get("suspectedHang"))
    parsed["suspectedHang"] = (
        None if suspected is None else {"signal": suspected.signal, "idleSeconds": suspected.idle_seconds}
    )
    spares = _spares(value.get("spares"))
    parsed["spares"] = None if spares is None else {"ready": spares.ready, "wanted": spares.wanted}
    parsed["agentMissing"] = _missing(value.get("agentMissing"))
    return parsed


#: The longest ``agentMissing`` taken (the entry's reasons are one sentence).
_MISSING_CHARS = 500


def _missing(value: object) -> str | None:
    """``agentMissing`` as a pod sent it: a non-empty sentence, cut to ``_MISSING_CHARS``; None otherwise."""
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()[:_MISSING_CHARS]


def _spares(value: object) -> Spares | None:
    """``spares`` as a pod sent it (two small counts, ready at most wanted); None where it is not that."""
    if not isinstance(value, dict):
        return None
    ready, wanted = checked.integer(value.get("ready")), checked.integer(value.get("wanted"))
    if ready is None or wanted is None or not 0 <= ready <= wanted <= 64:
        return None
    return Spares(ready, wanted)


def _suspected(value: object) -> SuspectedHang | None:
    """``suspectedHang`` as a pod sent it; None where it is not one."""
    if not isinstance(value, dict):
        return None
    signal_name, idle = value.get("signal"), checked.number(value.get("idleSeconds"))
    if not isinstance(signal_name, str) or len(signal_name) > 32 or idle is None:
        return None
    return SuspectedHang(signal_name, idle)


def _check(value: object) -> CheckResult | None:
    """A check's record as a pod sent it (bounded, checked); None where it is not one."""
    if not isinstance(value, dict):
        return None
    try:
        return CheckResult.from_dict(value)
    except (ValueError, TypeError):
        return None


def _fold_live_round(summary: dict[str, Any], record: dict[str, Any]) -> bool:
    """One worker's ``live-reformed``: a new round is kept (the latest ``KEPT``); a round already kept is
    replaced only by rank 0's word on it."""
    entry = checked.round_entry(
        {
            "at": record.get("at") if checked.number(record.get("at")) is not None else record.get("time"),
            "round": record.get("round"),
            "worldSize": record.get("world_size"),
            "step": record.get("step"),
            "origin": record.get("origin"),
            "rank": record.get("rank"),
            "seconds": record.get("seconds"),
            "cause": record.get("cause"),
        }
    )
    if entry is None:
        return False
    rounds = summary["liveRounds"]
    for position, kept in enumerate(rounds):
        if kept["round"] == entry["round"]:
            if entry.get("rank") != 0 or kept.get("rank") == 0:
                return False
            rounds[position] = entry
            return True
    kept = [*rounds, entry]
    dropped = max(len(kept) - KEPT, 0)
    summary["liveRounds"] = kept[dropped:]
    summary["liveRoundsFrom"] += dropped
    return True
