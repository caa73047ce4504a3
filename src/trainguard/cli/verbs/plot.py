"""``trainguard plot JOB -o timeline.png``: the fault timeline of a job, as a picture.

One lane per pod: when it started, ran, failed, was lost with its node, hung, or was restarted with others;
a marker at each fault with what was done (restarted in place, as a new pod, on another node) and how long
recovery took; a dashed line at each scaling step of a role; the job's phases on top. The data is the
job's status (``trainguard.observability.timeline``): from the local runtime, or from a JSON file with
``--from-json`` (what ``trainguard get JOB -o json`` prints, or a bare status, e.g. from the operator or the
simulator). ``--data FILE`` also writes the plotted intervals and events as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import yaml

from trainguard.cli.errors import CliError
from trainguard.cli.verbs._local import call
from trainguard.observability.timeline import Timeline, build, status_of

#: Colours of pod states and job phases (colour-blind-safe where it matters: ran vs. failed vs. hung).
STATE_COLOURS = {
    "starting": "#c6dbef",
    "running": "#2ca25f",
    "failed": "#d7301f",
    "lost": "#fc8d59",
    "hung": "#7b3294",
    "restarting": "#fdd49e",
}
PHASE_COLOURS = {
    "Pending": "#bdbdbd",
    "Creating": "#c6dbef",
    "Running": "#2ca25f",
    "Restarting": "#fc8d59",
    "Scaling": "#6baed6",
    "Suspended": "#969696",
    "Succeeded": "#006d2c",
    "Failed": "#d7301f",
    "Timeout": "#8c510a",
}
_MARKERS = {"Hang": "D", "NodeNotReady": "v", "PodForceDeleted": "v", "PodEvicted": "v"}
FORMATS = (".png", ".svg", ".pdf")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="draw a job's fault timeline (pods, faults, restarts, scaling, recovery times)",
        description="Draw the fault timeline of a local job, or of a job status in a JSON file.",
    )
    parser.add_argument("job", metavar="JOB", nargs="?", help="a job of the local runtime")
    parser.add_argument(
        "--from-json",
        metavar="FILE",
        help="read the job from FILE instead: 'trainguard get JOB -o json' output, or a bare status",
    )
    parser.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the picture to write (.png, .svg or .pdf)"
    )
    parser.add_argument("--data", metavar="FILE", help="also write the plotted intervals and events as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if (args.job is None) == (args.from_json is None):
        raise CliError("plot: give either JOB or --from-json FILE (one of them)")
    output = Path(args.output)
    if output.suffix.lower() not in FORMATS:
        raise CliError(f"-o {args.output}: the picture must end in {', '.join(FORMATS)}")
    if args.from_json is not None:
        timeline = _from_file(Path(args.from_json))
    else:
        view = call("get", job=args.job)
        name, status = status_of(view)
        ongoing = status.get("phase") not in ("Succeeded", "Failed", "Timeout")
        timeline = build(name, status, now=time.time() if ongoing else None)
    draw(timeline, output)
    if args.data:
        _write(Path(args.data), json.dumps(timeline.to_dict(), indent=2) + "\n")
    print(f"wrote {output} ({_counts(timeline)}, {timeline.end - timeline.start:.0f} s)")
    return 0


def _counts(timeline: Timeline) -> str:
    """``3 pods, 1 fault, 2 scaling steps``."""
    counts = (
        (len(timeline.lanes), "pod"),
        (len(timeline.faults), "fault"),
        (len(timeline.scale_steps), "scaling step"),
    )
    return ", ".join(f"{n} {word}{'' if n == 1 else 's'}" for n, word in counts)


def _from_file(path: Path) -> Timeline:
    try:
        text = path.read_text()
    except OSError as error:
        raise CliError(f"{path}: {error.strerror}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        try:
            document = yaml.safe_load(text)  # what 'get -o yaml' prints is accepted too
        except yaml.YAMLError:
            document = None
    if not isinstance(document, dict):
        raise CliError(f"{path}: not a JSON object; give what 'trainguard get JOB -o json' prints")
    try:
        name, status = status_of(document)
        return build(name, status)
    except (ValueError, KeyError, TypeError) as error:
        message = str(error).splitlines()[0]
        hint = "give what 'trainguard get JOB -o json' prints"
        raise CliError(f"{path}: not a job status ({message}); {hint}") from None


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as error:
        raise CliError(f"{path}: {error.strerror}") from None


def draw(timeline: Timeline, output: Path) -> None:
    """Render with matplotlib's Agg canvas (no display, no global pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    lanes = timeline.lanes
    rows = len(lanes) + 1  # the job's phases on top
    figure = Figure(figsize=(12, 1.6 + 0.45 * rows), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    start = timeline.start

    def x(at: float) -> float:
        return at - start

    top = rows - 1
    for segment in timeline.phases:
        axes.broken_barh(
            [(x(segment.start), segment.end - segment.start)],
            (top - 0.35, 0.7),
            facecolors=PHASE_COLOURS.get(segment.state, "#d9d9d9"),
        )
    for row, lane in enumerate(lanes):
        y = top - 1 - row
        for segment in lane.segments:
            axes.broken_barh(
                [(x(segment.start), segment.end - segment.start)],
                (y - 0.3, 0.6),
                facecolors=STATE_COLOURS.get(segment.state, "#d9d9d9"),
                edgecolor="white",
                linewidth=0.5,
            )
    rows_of = {lane.pod: top - 1 - row for row, lane in enumerate(lanes)}
    for fault in timeline.faults:
        row_y = rows_of.get(fault.pod)
        if row_y is None:
            continue
        marker = _MARKERS.get(fault.fault, "X")
        axes.plot([x(fault.at)], [row_y], marker=marker, color="black", markersize=7, zorder=3)
        axes.annotate(fault.label, (x(fault.at), row_y + 0.32), fontsize=7, ha="left", va="bottom", zorder=4)
    for step in timeline.scale_steps:
        axes.axvline(x(step.at), color="#3182bd", linestyle="--", linewidth=1)
        axes.annotate(step.label, (x(step.at), top + 0.37), fontsize=8, color="#08519c", va="bottom")
    prefix = f"{timeline.job}-"
    names = [lane.pod.removeprefix(prefix) for lane in reversed(lanes)]
    axes.set_yticks(range(rows), [*names, "job phase"])
    axes.set_ylim(-0.7, rows - 0.3)
    axes.set_xlim(0, max(timeline.end - start, 1.0) * 1.02)
    axes.set_xlabel("seconds since the job started")
    axes.grid(axis="x", color="#eeeeee")
    axes.set_title(f"job {timeline.job}: {_counts(timeline)}", loc="left")
    seen_states = {s.state for lane in lanes for s in lane.segments}
    seen_phases = {s.state for s in timeline.phases}
    handles = [Patch(color=c, label=f"pod {s}") for s, c in STATE_COLOURS.items() if s in seen_states]
    handles += [Patch(color=c, label=f"job {p}") for p, c in PHASE_COLOURS.items() if p in seen_phases]
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    try:
        figure.savefig(output)
    except OSError as error:
        raise CliError(f"{output}: {error.strerror or error}") from None
