"""A run's figures as one JSON-able object, and as the text a person reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainguard.backends.sim.accounting import Cause
from trainguard.backends.sim.compare import Row
from trainguard.backends.sim.fit import fitted_best_interval
from trainguard.backends.sim.run import DAY, HOUR, RunResult
from trainguard.backends.sim.theory import expected_goodput

_WORDS = {
    Cause.REWORK: "rework since the last checkpoint",
    Cause.CHECKPOINTING: "checkpointing",
    Cause.DETECTION: "detection",
    Cause.RESTART: "restart",
    Cause.WAITING_FOR_CAPACITY: "waiting for capacity",
    Cause.SHRUNK: "fewer workers (shrunk)",
    Cause.STARTUP: "start-up",
    Cause.JOB_FAILED: "job failed",
}


def summary(result: RunResult) -> dict[str, Any]:
    """Figures of one run (at its own interval)."""
    config = result.config
    ledger = result.ledger()
    interruptions = result.interruptions()
    return {
        "job": result.job.name,
        "phase": result.phase.value,
        "goodput": round(ledger.goodput, 5),
        "lost_by_cause": {cause.value: round(seconds, 1) for cause, seconds in ledger.lost.items()},
        "lost_share": {
            cause.value: round(seconds / ledger.wall, 5) for cause, seconds in ledger.lost.items()
        },
        "restarts": result.restarts(),
        "interruptions": {"total": sum(interruptions.values()), **dict(sorted(interruptions.items()))},
        "interval_s": round(result.interval, 1),
        "checkpoint_cost_s": config.checkpoint_cost,
        "restart_cost_s": config.restart_cost,
        "useful_hours": round(ledger.useful / HOUR, 2),
        "wall_hours": round(ledger.wall / HOUR, 2),
        "reconciles": result.reconciles,
        **_bad_nodes(result),
    }


def _bad_nodes(result: RunResult) -> dict[str, Any]:
    """Where there are bad nodes: how many, how many were isolated, their faults and the pods issued again."""
    if not result.bad_nodes:
        return {}
    return {
        "bad_nodes": len(result.bad_nodes),
        "isolated_nodes": len(result.isolated),
        "bad_node_faults": dict(sorted(result.bad_faults.items())),
        "reissues": result.reissues,
    }


def report(result: RunResult, rows: Sequence[Row] = (), plots: Sequence[str] = ()) -> dict[str, Any]:
    """Everything ``trainguard simulate -o json`` prints."""
    config = result.config
    theory = result.theory()
    best, best_goodput = result.best_interval()
    fitted = fitted_best_interval(result)
    data: dict[str, Any] = {
        **summary(result),
        "gpus": config.gpus,
        "gpus_per_node": config.gpus_per_node,
        "nodes": config.nodes,
        "spare_nodes": config.spares,
        "days": config.days,
        "seed": config.seed if config.trace is None else None,
        "trace": config.trace is not None,
        "mtbf_hours_per_node": config.mtbf_hours,
        "theory": {
            **{key: round(value, 5) for key, value in theory.items()},
            "goodput_at_interval": round(
                expected_goodput(
                    result.interval, config.checkpoint_cost, config.restart_cost, config.job_mtbf
                ),
                5,
            ),
        },
        "best_interval_s": round(fitted, 1),
        "best_interval_argmax_s": round(best, 1),
        "goodput_at_best_interval": round(best_goodput, 5),
    }
    if rows:
        data["compare"] = [{"policy": row.policy, **summary(row.result)} for row in rows]
    if plots:
        data["plots"] = list(plots)
    return data


def text(result: RunResult, rows: Sequence[Row] = (), plots: Sequence[str] = ()) -> str:
    config = result.config
    theory = result.theory()
    ledger = result.ledger()
    counts = result.interruptions()
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(counts.items())) or "none"
    restarts = result.restarts()
    tau_star = theory["young_daly_interval_s"]
    chosen = "Young/Daly's" if config.interval is None else "--interval-s"
    lines = [
        f"job {result.job.name}: {config.gpus} GPUs on {config.nodes} nodes of {config.gpus_per_node} "
        f"(+{config.spares} spare), {config.days:g} {'day' if config.days == 1 else 'days'}"
        + (" replaying a trace" if config.trace is not None else f", seed {config.seed}"),
        f"  node MTBF {config.mtbf_hours:g} h -> job MTBF {config.job_mtbf / HOUR:.2f} h; "
        f"{sum(counts.values())} interruptions ({kinds})",
        f"  checkpoint every {result.interval:.0f} s ({chosen}; tau* = {tau_star:.0f} s), "
        f"cost {config.checkpoint_cost:g} s, restart {config.restart_cost:g} s",
        "",
        f"goodput {ledger.goodput:.2%}  (theory at tau*: {theory['goodput_at_young_daly']:.2%} first order, "
        f"{theory['renewal_goodput_at_young_daly']:.2%} exact)   phase {result.phase.value}",
        "time lost by cause:",
    ]
    for cause, seconds in ledger.lost.items():
        if seconds > 0 or cause in (Cause.REWORK, Cause.DETECTION, Cause.RESTART, Cause.WAITING_FOR_CAPACITY):
            lines.append(f"  {_WORDS[cause]:<34} {seconds / HOUR:9.2f} h  {seconds / ledger.wall:6.2%}")
    lines.append(
        f"restarts by scope: Pod {restarts['Pod']}, Replica {restarts['Replica']}, All {restarts['All']}; "
        f"in place {restarts['InPlace']}; shrinks {restarts['shrink']}, grows {restarts['grow']}"
    )
    if result.bad_nodes:
        found = ", ".join(f"{how} {count}" for how, count in sorted(result.bad_faults.items())) or "none"
        lines.append(
            f"bad nodes {len(result.bad_nodes)} (failing every {config.bad_nodes.mtbf_hours:g} h): "
            f"isolated {len(result.isolated)}; their faults {found}; pods issued again {result.reissues}"
        )
    best, best_goodput = result.best_interval()
    lines.append(
        f"best interval on these faults: {fitted_best_interval(result):.0f} s (fitted; highest point "
        f"{best:.0f} s at {best_goodput:.2%})"
    )
    if rows:
        lines += ["", *table(rows)]
    if plots:
        lines += ["", *(f"wrote {path}" for path in plots)]
    if result.wall < config.days * DAY:
        lines.append(f"the job ended at {result.wall / HOUR:.1f} h")
    return "\n".join(lines)


_COLUMNS = (
    (Cause.REWORK, "rework"),
    (Cause.DETECTION, "detect"),
    (Cause.RESTART, "restart"),
    (Cause.WAITING_FOR_CAPACITY, "capacity"),
    (Cause.CHECKPOINTING, "ckpt"),
    (Cause.SHRUNK, "shrunk"),
    (Cause.JOB_FAILED, "failed"),
)


def table(rows: Sequence[Row]) -> list[str]:
    """The comparison: goodput and each cause's share of the wall time, per policy."""
    width = max(len(row.policy) for row in rows)
    header = f"{'policy':<{width}}  goodput " + " ".join(f"{name:>8}" for _, name in _COLUMNS) + "  restarts"
    lines = [header, "-" * len(header)]
    for row in rows:
        ledger = row.result.ledger()
        shares = " ".join(f"{ledger.lost[cause] / ledger.wall:8.2%}" for cause, _ in _COLUMNS)
        r = row.result.restarts()
        moves = f"Pod {r['Pod']} All {r['All']} in-place {r['InPlace']} shrink {r['shrink']}"
        if row.result.bad_nodes:
            moves += f" isolated {len(row.result.isolated)}/{len(row.result.bad_nodes)} bad"
        lines.append(f"{row.policy:<{width}}  {ledger.goodput:7.2%} {shares}  {moves}")
    return lines
