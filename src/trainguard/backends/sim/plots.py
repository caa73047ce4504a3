"""The pictures a platform team looks at: the fault/recovery timeline, goodput against the checkpoint
interval, and (with ``--compare``) where each policy loses its time. PNG files, drawn with matplotlib's Agg
backend (no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainguard.backends.sim.accounting import Cause, split
from trainguard.backends.sim.compare import Row
from trainguard.backends.sim.failures import FailureKind
from trainguard.backends.sim.fit import fitted_best_interval
from trainguard.backends.sim.run import DAY, RunResult
from trainguard.backends.sim.theory import expected_goodput

COLORS = {
    Cause.REWORK: "#d62728",
    Cause.CHECKPOINTING: "#7f7f7f",
    Cause.DETECTION: "#ff7f0e",
    Cause.RESTART: "#1f77b4",
    Cause.WAITING_FOR_CAPACITY: "#9467bd",
    Cause.SHRUNK: "#bcbd22",
    Cause.STARTUP: "#17becf",
    Cause.JOB_FAILED: "#000000",
}
MARKERS = {FailureKind.NODE: "v", FailureKind.CRASH: "x", FailureKind.HANG: "s", FailureKind.EVICT: "^"}
TRAINING = "#2ca02c"
#: An outage is drawn at least 1/MIN_SPANS of the timeline wide.
MIN_SPANS = 600


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def timeline(result: RunResult, path: Path) -> Path:
    """Top: when the job trained and, between, why not; fault marks by kind. Bottom: share of workers."""
    plt = _pyplot()
    figure, (band, world) = plt.subplots(
        2, 1, figsize=(12, 4.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]}
    )
    trained = [(s.start / DAY, (s.end - s.start) / DAY) for s in result.segments]
    band.broken_barh(trained, (0, 1), facecolors=TRAINING, label="training")
    config = result.config
    rework = [
        (segment.end / DAY - lost / DAY, lost / DAY)
        for segment in result.segments
        if (lost := split(segment, result.interval, config.checkpoint_cost).rework) > 0
    ]
    band.broken_barh(rework, (0, 1), facecolors=COLORS[Cause.REWORK], label="rework")
    thinnest = result.wall / DAY / MIN_SPANS  # so that an outage of minutes in weeks still shows
    for cause in Cause:
        spans = [(a / DAY, max((b - a) / DAY, thinnest)) for a, b, c in result.down_spans if c is cause]
        if spans:
            band.broken_barh(spans, (0, 1), facecolors=COLORS[cause], label=cause.value.replace("_", " "))
    for offset, kind in enumerate(FailureKind):
        times = [f.at / DAY for f in result.faults if f.kind is kind and f.pod is not None]
        if times:
            band.scatter(
                times, [1.3 + 0.2 * offset] * len(times), marker=MARKERS[kind], s=18, label=kind.value
            )
    band.set_ylim(-0.1, 2.3)
    band.set_yticks([])
    band.set_title(
        f"{result.job.name}: {result.config.gpus} GPUs, {len(result.faults)} faults, goodput {result.goodput:.1%}"
    )
    band.legend(loc="upper right", ncol=6, fontsize=7)
    steps_x: list[float] = [0.0]
    steps_y: list[float] = [0.0]
    for segment in result.segments:
        steps_x += [segment.start / DAY, segment.start / DAY, segment.end / DAY, segment.end / DAY]
        steps_y += [0.0, segment.fraction, segment.fraction, 0.0]
    world.plot(steps_x, steps_y, color=TRAINING, linewidth=0.8)
    world.set_ylim(0, 1.1)
    world.set_ylabel("workers\ntraining")
    world.set_xlabel("days")
    world.set_xlim(0, result.wall / DAY)
    return _save(figure, path)


def goodput_vs_interval(result: RunResult, path: Path) -> Path:
    """Simulated goodput at every interval (same faults) against Young/Daly's first-order curve."""
    plt = _pyplot()
    config = result.config
    star = config.young_daly
    center = result.search_center()
    points = result.curve(min(star, center) / 8, max(star, center) * 8, 121)
    taus = [tau for tau, _ in points]
    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.plot(taus, [g for _, g in points], label="simulated", color=TRAINING)
    expected = [
        expected_goodput(t, config.checkpoint_cost, config.restart_cost, config.job_mtbf) for t in taus
    ]
    axes.plot(taus, expected, "--", color="#555555", label="1 - δ/τ - τ/2M - R/M")
    axes.axvline(star, color="#1f77b4", linestyle=":", label=f"τ* = √(2δM) = {star:.0f} s")
    best = fitted_best_interval(result)
    axes.axvline(best, color="#d62728", linestyle=":", label=f"best simulated ≈ {best:.0f} s")
    axes.set_xscale("log")
    low = min(min(g for _, g in points), min(expected))
    axes.set_ylim(max(low, 0.0), min(1.0, max(g for _, g in points) + 0.02))
    axes.set_xlabel("checkpoint interval τ (s)")
    axes.set_ylabel("goodput")
    axes.set_title(
        f"goodput against checkpoint interval (δ {config.checkpoint_cost:g} s, R {config.restart_cost:g} s)"
    )
    axes.legend(fontsize=8)
    return _save(figure, path)


def policies(rows: Sequence[Row], path: Path) -> Path:
    """Each policy's wall time: useful, and lost by cause (stacked bars)."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 0.6 * len(rows) + 2.2))
    labels = [row.policy for row in rows]
    ledgers = [row.result.ledger() for row in rows]
    left = [ledger.goodput for ledger in ledgers]
    axes.barh(labels, left, color=TRAINING, label="useful")
    for cause in Cause:
        widths = [ledger.lost[cause] / ledger.wall for ledger in ledgers]
        if any(widths):
            axes.barh(labels, widths, left=left, color=COLORS[cause], label=cause.value.replace("_", " "))
            left = [a + b for a, b in zip(left, widths, strict=True)]
    axes.invert_yaxis()
    axes.set_xlim(min(ledger.goodput for ledger in ledgers) - 0.05, 1.0)
    axes.set_xlabel("share of wall time")
    axes.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    return _save(figure, path)


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    _pyplot().close(figure)
    return path


def draw_all(result: RunResult, directory: Path, rows: Sequence[Row] = ()) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = [
        timeline(result, directory / "timeline.png"),
        goodput_vs_interval(result, directory / "goodput_vs_interval.png"),
    ]
    if rows:
        paths.append(policies(rows, directory / "policies.png"))
    return paths
