"""docs/operator.md's tables of ``k8s_peers.py``'s rounds, made from the raw files alone: what was run, each
figure's median and range per operator and setting, and trainguard's medians over each peer's. Pure: the doc's
tables are checked against it (``tests/docs/test_peer_tables.py``) and ``k8s_peers.py --table`` prints it.

The doc marks each table with the files it is made from: ``<!-- k8s_peers --table FILE... -->`` before it and
``<!-- end of k8s_peers table -->`` after it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

if __package__:  # imported as benchmarks._peer_table (the tests)
    from benchmarks._peers import COMPARED, combine, entries_of, positions, ratios, summarize
else:  # beside k8s_peers.py, its directory on the path
    from _peers import COMPARED, combine, entries_of, positions, ratios, summarize

Obj = dict[str, Any]
BEGIN = "<!-- k8s_peers --table "
END = "<!-- end of k8s_peers table -->"
#: The columns, in order: (peer, mode, heading).
COLUMNS = (
    ("trainguard", "as_shipped", "trainguard"),
    ("kubeflow", "as_shipped", "Kubeflow as shipped"),
    ("kubeflow", "equal", "Kubeflow equal"),
    ("volcano", "as_shipped", "Volcano as shipped"),
    ("volcano", "equal", "Volcano equal"),
)
SECONDS, COUNT, MIB = " s", "", " MiB"


#: The figures a raw file keeps to hundredths of a second where it says so (``seconds_kept_to``: 0.01, from
#: f76e043 on); every other figure, and every figure of a file before, to tenths.
HUNDREDTHS = frozenset(
    {"all_running_s", "back_after_exit_codes_s", "back_after_force_delete_s", "scaled_running_s"}
)


def _number(value: float, unit: str, digits: int) -> str:
    if unit == COUNT:
        return f"{value:,g}"
    return f"{value:,.{digits}f}"


def cell(median: Any, spread: Sequence[Any], unit: str, digits: int = 1) -> str:
    """``median unit (lowest-highest)``, the range only where the rounds differ; ``-`` where no round got there
    while it was measured (None), ``none`` for such a round in the range. ``digits``: the figure's decimals,
    as its raw file kept it."""
    if not isinstance(median, (int, float)):
        return "-"
    text = _number(median, unit, digits) + unit
    low, high = spread
    if low != high:
        ends = ["none" if v is None else _number(v, unit, digits) for v in (low, high)]
        text += f" ({ends[0]}-{ends[1]})"
    return text


def digits_of(described: Mapping[str, Any], figure: str) -> int:
    """The decimals ``figure`` was kept to in the raw files ``described`` (``HUNDREDTHS``)."""
    return 2 if described.get("seconds_kept_to") == 0.01 and figure in HUNDREDTHS else 1


def _rows(described: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    jobs, pods = int(described["jobs"]), int(described["pods_per_job"])
    hit = max(1, math.ceil(jobs * 0.1))
    some = f"{hit} job" if hit == 1 else f"{hit} jobs"
    return [
        (f"submit -> all {jobs * pods:,} pods Running", "all_running_s", SECONDS),
        (f"exit code 137 in {some} -> back", "back_after_exit_codes_s", SECONDS),
        (
            f"stuck Terminating {described['hold_s']:g} s, then force-deleted, {some} -> back",
            "back_after_force_delete_s",
            SECONDS,
        ),
        ("... jobs whole while Terminating", "jobs_whole_while_terminating", COUNT),
        (f"Workers +{described['scale_by']} in {some} -> Running", "scaled_running_s", SECONDS),
        (
            f"{described['nodes_down']} nodes NotReady -> all lost pods back",
            "back_after_node_loss_s",
            SECONDS,
        ),
        ("... pods lost with the nodes", "pods_lost_with_nodes", COUNT),
        ("... still short at the window's end", "pods_not_back_after_window", COUNT),
        ("... the last node tainted NoExecute", "nodes_tainted_s", SECONDS),
        ("... the last lost pod deleted", "lost_pods_deleted_s", SECONDS),
        ("operator's CPU", "cpu_s", SECONDS),
        ("operator's peak memory (RSS)", "peak_memory_mib", MIB),
    ]


def _helpers(figures: Mapping[str, Any], figure: str) -> list[str]:
    """The processes beside an operator's controller that have this figure (vc-scheduler's ``_cpu_s``...)."""
    suffix = f"_{figure}"
    return sorted(k.removesuffix(suffix) for k in figures if k.endswith(suffix) and k != figure)


def _ratio(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _provenance(kept: Sequence[tuple[str, Mapping[str, Any]]], rounds: Sequence[Obj]) -> str:
    """One line of what the figures are from: the rounds, their orders, commits, load and wall time."""
    commits = sorted({str((content.get("machine") or {}).get("commit")) for _, content in kept})
    cpus = sorted({str((content.get("machine") or {}).get("cpus")) for _, content in kept})
    starts = [(content.get("machine") or {}).get("load_average", [None])[0] for _, content in kept]
    ends = [(content.get("machine_at_end") or {}).get("load_average", [None])[0] for _, content in kept]
    walls = [content.get("wall_s") for _, content in kept]
    orders = "; ".join(f"round {r['run']}: {', '.join(entries_of(r))}" for r in rounds)
    taken = positions(r["order"] for r in rounds if r.get("order"))
    firsts = sorted(entry for entry, places in taken.items() if 1 in places)
    wall = (
        "not kept" if any(w is None for w in walls) else " + ".join(f"{float(w) / 60:.1f} min" for w in walls)
    )
    return (
        f"From {', '.join(name for name, _ in kept)}: {len(rounds)} round{'s' if len(rounds) != 1 else ''} "
        f"({orders}; first: {', '.join(firsts)}); commit {', '.join(commits)}; {', '.join(cpus)} cores; load "
        f"average (1 min) {', '.join(str(s) for s in starts)} at the start, {', '.join(str(e) for e in ends)} at "
        f"the end; wall time {wall}."
    )


def table_of(kept: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """The lines docs/operator.md shows for these kept raw files (``(name, content)``): a line of what was run,
    a table of medians (ranges), and one of trainguard's medians over each peer's."""
    described, rounds = combine(kept)
    medians, ranges = summarize([r["figures"] for r in rounds])
    columns = [(p, m, h) for p, m, h in COLUMNS if m in medians.get(p, {})]
    lines = [_provenance(kept, rounds), ""]
    lines.append("| figure | " + " | ".join(h for _, _, h in columns) + " |")
    lines.append("|---" * (len(columns) + 1) + "|")
    for label, figure, unit in _rows(described):
        cells = []
        digits = digits_of(described, figure)
        for peer, mode, _ in columns:
            median, spread = medians[peer][mode], ranges[peer][mode]
            text = cell(median.get(figure), spread.get(figure, [None, None]), unit, digits)
            for helper in _helpers(median, figure):
                key = f"{helper}_{figure}"
                text += f" + {helper} {cell(median.get(key), spread.get(key, [None, None]), unit, digits)}"
            cells.append(text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    ours = medians.get("trainguard", {}).get("as_shipped")
    peers = [(p, m, h) for p, m, h in columns if p != "trainguard"]
    if ours is not None and peers:
        lines += ["", "| trainguard's median over | " + " | ".join(h for _, _, h in peers) + " |"]
        lines.append("|---" * (len(peers) + 1) + "|")
        over = {(p, m): ratios(ours, medians[p][m]) for p, m, _ in peers}
        labels = {figure: label for label, figure, unit in _rows(described) if unit != COUNT}
        for figure in (f for f in COMPARED if f in labels):
            cells = [_ratio(over[(p, m)][figure]) for p, m, _ in peers]
            lines.append(f"| {labels[figure]} | " + " | ".join(cells) + " |")
    return lines + _settings_table(kept[0][1].get("settings") or {})


def _settings_table(recorded: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """What each operator was given in each setting, and why, as the raw file records it (files kept before
    the reasons were recorded: nothing)."""
    given = [(p, m, h, recorded[p][m]) for p, m, h in COLUMNS if "why" in recorded.get(p, {}).get(m, {})]
    if not given:
        return []
    lines = ["", "| operator | flags | jobs reconciled at once | a job's pods | requests in flight | why |"]
    lines.append("|---|---|---|---|---|---|")
    for _, _, heading, setting in given:
        flags = " ".join(setting["flags"])
        pods = str(setting["job_pods"]).replace("_", " ")
        bound = setting["requests_in_flight"]
        in_flight = f"{bound:,}" if bound is not None else "workers x a job's pods"
        lines.append(
            f"| {heading} | `{flags}` | {setting['workers']} | {pods} | {in_flight} | {setting['why']} |"
        )
    return lines


def marked_tables(doc: str, begin: str = BEGIN) -> list[tuple[list[str], list[str]]]:
    """The tables a document marks with ``begin`` (this module's, or ``_submit_trace.BEGIN``): (the files named,
    the lines between the marks). ValueError where a mark is not closed."""
    found: list[tuple[list[str], list[str]]] = []
    lines = doc.splitlines()
    for number, line in enumerate(lines):
        if not line.startswith(begin):
            continue
        files = line.removeprefix(begin).removesuffix("-->").split()
        try:
            end = lines.index(END, number + 1)
        except ValueError:
            raise ValueError(f"line {number + 1}: {begin.strip()} without {END} after it") from None
        found.append((files, lines[number + 1 : end]))
    return found
