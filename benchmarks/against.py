"""One benchmark at this tree and at an earlier commit, side by side in one run, alternating which goes first.

    python benchmarks/against.py --base 714fe44 [--rounds 3] -- local_reconcile.py --replicas 20000

The base commit is checked out in a git worktree (``--worktree``, default a temporary directory) and its
benchmark runs with that tree's ``src`` first on ``PYTHONPATH`` (so its own trainguard is measured); this
tree's runs as it is. With ``--same-script`` both runs are of this tree's benchmark (the same measure, where
the base's own differs), which starts the trainguard under test from ``TRAINGUARD_UNDER_TEST`` (the tree's
``src``): for benchmarks that run trainguard as a separate process, such as ``k8s_peers.py``'s operator.
Round ``i`` runs the base first when ``i`` is even, this tree first when odd. Each run's last line (the
benchmark's JSON figures) is kept; the medians of every numeric figure are printed, with the ratio this/base.
The raw runs are kept under ``benchmarks/results/`` with the commits, the machine and its load. The last line
printed is one JSON object of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _results import ENV_UNDER_TEST, keep, machine

ROOT = Path(__file__).resolve().parents[1]


def _run(tree: Path, script: str, args: list[str], same_script: bool) -> dict[str, Any]:
    if same_script:
        env = {**os.environ, ENV_UNDER_TEST: str(tree / "src")}
        where = ROOT
    else:
        env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        where = tree
    done = subprocess.run(
        [sys.executable, str(where / "benchmarks" / script), *args],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{script} at {tree} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    figures = json.loads(lines[-1])
    print(f"  {tree.name}: {lines[-1]}", flush=True)
    return figures


def _numbers(run: dict[str, Any], prefix: str = "") -> dict[str, float]:
    found: dict[str, float] = {}
    for key, value in run.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            found[prefix + key] = float(value)
        elif isinstance(value, dict):
            found.update(_numbers(value, f"{prefix}{key}."))
    return found


def _medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    numbers = [_numbers(run) for run in runs]
    keys = sorted(set.intersection(*(set(n) for n in numbers))) if numbers else []
    return {key: statistics.median(n[key] for n in numbers) for key in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the earlier commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--worktree", type=Path, help="where to check the base out (default: a temporary dir)"
    )
    parser.add_argument("--this", help="measure this commit (checked out beside the base), not the tree")
    parser.add_argument(
        "--same-script",
        action="store_true",
        help=f"run this tree's benchmark both times, with {ENV_UNDER_TEST} naming each tree's src",
    )
    parser.add_argument("benchmark", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS...]")
    options = parser.parse_args()
    command = [part for part in options.benchmark if part != "--"]
    if not command:
        parser.error("name the benchmark script after --")
    script, args = command[0], command[1:]
    worktree = options.worktree or Path(tempfile.mkdtemp(prefix="trainguard-base-")) / "base"
    if not (worktree / "src").is_dir():
        subprocess.run(["git", "worktree", "add", "-f", str(worktree), options.base], cwd=ROOT, check=True)
    this = ROOT
    if options.this:
        this = worktree.parent / "this"
        if not (this / "src").is_dir():
            subprocess.run(["git", "worktree", "add", "-f", str(this), options.this], cwd=ROOT, check=True)
    trees = {"base": worktree, "this": this}
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "this": []}
    for round_ in range(options.rounds):
        order = ("base", "this") if round_ % 2 == 0 else ("this", "base")
        print(f"round {round_ + 1}: {' then '.join(order)}", flush=True)
        for which in order:
            runs[which].append(_run(trees[which], script, args, options.same_script))
    medians = {which: _medians(found) for which, found in runs.items()}
    ratios = {
        key: round(medians["this"][key] / medians["base"][key], 3)
        for key in medians["this"]
        if key in medians["base"] and medians["base"][key]
    }
    for key, ratio in ratios.items():
        print(
            f"{key:40s} base {medians['base'][key]:10.3f}  this {medians['this'][key]:10.3f}  {ratio:6.3f}x"
        )
    summary = {
        "benchmark": script,
        "args": args,
        "base": options.base,
        "this": options.this or "the working tree",
        "same_script": options.same_script,
        "medians": medians,
        "ratio": ratios,
    }
    kept = keep(
        f"against-{Path(script).stem}",
        {**summary, "machine": machine(), "runs": runs, "rounds": options.rounds},
    )
    print(f"raw runs kept in {kept.relative_to(ROOT)}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
