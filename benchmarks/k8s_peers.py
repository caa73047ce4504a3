"""trainguard's operator beside its peers, Kubeflow's training operator (v1.9) and Volcano's Job (v1.14): the same
faults on the same kwok cluster, one operator after the other, each with its own CRDs and nothing else changed
between the runs.

    python benchmarks/k8s_peers.py [--quick] [--nodes 1000] [--jobs 500] [--pods 8] [--runs 5]
                                   [--toleration 300] [--window S] [--only trainguard,kubeflow,volcano]
                                   [--first-run N] [--from-entry K] [--submit-trace]
    python benchmarks/k8s_peers.py --summarize benchmarks/results/k8s_peers-1000n-*.json
    python benchmarks/k8s_peers.py --table benchmarks/results/k8s_peers-quick-*.json   # docs/operator.md's table
    python benchmarks/k8s_peers.py --trace-table KEPT...   # its table of the submits traced (--submit-trace)

For each operator, with the cluster's nodes fresh and no job on it:
1. submit J jobs of P pods -> every job has its P pods Running (trainguard and Kubeflow: PyTorchJobs, half
   Kubeflow's Master + Workers example, half its elastic example; Volcano: Jobs of a launcher and workers, the
   shape of CCE's Horovod example);
2. one Worker in a tenth of the jobs ends with exit code 137 -> every job has its pods Running again, the
   failed ones replaced;
3. a Worker in another tenth is deleted and stays Terminating (a finalizer stands in for the kubelet of a
   NotReady node, which never confirms), ``--hold`` seconds, then is force-deleted -> those jobs have all their
   pods again (and how many were whole before the force-deletion);
4. the Worker replicas of another tenth (the elastic PyTorchJobs; Volcano: its worker task) go up by 2 -> the
   new pods Running;
5. the busiest tenth of the nodes go NotReady -> every job has its pods Running on nodes that are Ready, or the
   count still short when the window ends. The window lets Kubernetes' own eviction finish: the pods'
   toleration of the NotReady taint + the taints' pace (kube-controller-manager's --node-eviction-rate, 0.1
   node/s) + 90 s;
6. the operator's CPU seconds and peak resident memory over the run (its process, read from /proc).

Before the operator starts, an object of each kind its CRDs define is written with ``dryRun``: the API server's
first write of a kind whose CRD was just established waits about 2 s, which the operator ready soonest would
otherwise pay in its submit (``crd_first_write_s``).

Each peer is measured twice: as its manifests run it ("as_shipped") and with trainguard's means ("equal": no
client rate limit, and as many requests in flight as trainguard can have, see ``_peers.KUBEFLOW_EQUAL`` and
``VOLCANO_EQUAL`` for why each is given what it is). trainguard's settings are the same in both, so it runs
once per round and its figures stand under both. ``--runs N`` repeats the whole round, each starting one
entry further along: over as many rounds as there are entries (5, the default at full size) each entry takes
every position once. The raw figures of every run are kept under benchmarks/results/ with the commit, the
machine, its load, each operator's settings and why, each round's order and the wall time.
At full size a round takes hours on a small machine (the peers wait out Kubernetes' eviction of 100 nodes),
so rounds may be taken by separate invocations: ``--first-run N`` numbers this invocation's first round N (the
order goes on rotating), ``--from-entry K`` starts that first round at its K-th entry (an earlier invocation
with the same ``--first-run`` took the ones before: a round longer than a session is taken in parts; the file
is rewritten after each entry, so a stopped invocation loses only the entry it was in), and ``--summarize
KEPT...`` runs nothing and prints the summary of the rounds in those kept files, which must be of the same
size, the parts of a round joined.

Kubeflow's operator is built from its Go module (scripts/build-kubeflow; cached), Volcano's scheduler and
controller manager by scripts/k8s-testcluster (as for real nodes; cached). What a kwok cluster cannot do is
changed (see docs/operator.md): no admission webhooks (Kubeflow's validation, Volcano's defaults, written into
the Jobs instead), Kubeflow's certificate Secret written to the directory its process reads, and only the
PyTorchJob controller of Kubeflow's enabled.

``--quick``: 20 nodes, 10 jobs of 4 pods, a toleration of 10 s, one round (under 10 minutes in all). The last
line printed is one JSON object: {"trainguard": {"as_shipped": {...}, "equal": {...}}, "kubeflow": {...},
"volcano": {...}, "ratio": {"kubeflow": {"as_shipped": {...}, ...}, ...}, "range": {...}, "settings": {...},
...}: the medians of each figure, trainguard's over each peer's, and the lowest and highest of the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _kwok import POD_COMPLETE_STAGE, batch_jobs_only
from _peer_cluster import ROOT, SCRIPTS, Obj, cluster_down, cluster_up, create, say
from _peer_operators import (
    Operator,
    kubeflow_crd,
    kubeflow_operator,
    trainguard_operator,
    under_test_commit,
    volcano_build,
    volcano_operator,
)
from _peer_run import Size, run_one
from _peer_table import table_of
from _peers import (
    DEFAULT_EVICTION_RATE,
    MODES,
    NAMESPACE,
    Settings,
    combine,
    kubeflow_flags,
    rounds_to_take,
    settings,
    summary_of,
    volcano_flags,
)
from _results import keep, machine
from _submit_trace import SubmitTrace, trace_table

from trainguard.api.crd import pytorchjob_crd
from trainguard.backends.k8s.client import Kube

PEERS = ("trainguard", "kubeflow", "volcano")


def entries(only: list[str]) -> list[tuple[str, str]]:
    """(peer, mode) to run in one round: trainguard once, each peer in both modes. Rotated by one entry from one
    round to the next (``_peers.order``), so that over as many rounds as entries each takes every position."""
    found = [(peer, "as_shipped") for peer in PEERS if peer in only]
    return found + [(peer, "equal") for peer in PEERS if peer in only and peer != "trainguard"]


def settings_table(only: list[str]) -> Obj:
    """Each operator's settings in each mode, with the flags that give them (a client limit of None: none)."""
    flags: dict[str, Callable[[Settings], list[str]]] = {
        "trainguard": lambda s: [
            "--workers",
            str(s.workers),
            "--requests-in-flight",
            str(s.requests_in_flight or 0),
        ],
        "kubeflow": kubeflow_flags,
        "volcano": volcano_flags,
    }
    return {
        peer: {
            mode: {**settings(peer, mode).as_json(), "flags": flags[peer](settings(peer, mode))}
            for mode in MODES
        }
        for peer in PEERS
        if peer in only
    }


def keep_rounds(
    kept: Path | None, raw: list[Obj], at_start: Obj, described: Obj, args: argparse.Namespace, wall_s: float
) -> Path:
    """The rounds run so far (an entry being run left out), in this invocation's one raw file: written the first
    time, rewritten after; ``wall_s``: the invocation's seconds so far (cluster, builds and clean-ups included)."""
    content = {
        "machine": at_start,
        **described,
        "runs_raw": [record for record in raw if record["entries"]],
        "machine_at_end": machine(),
        "wall_s": round(wall_s, 1),
    }
    if kept is None:
        name = "k8s_peers-quick" if args.quick else f"k8s_peers-{described['nodes']}n"
        return keep(name, content, args.results)
    kept.write_text(json.dumps(content) + "\n")
    return kept


def summarize_kept(files: list[str]) -> int:
    """``--summarize``: the summary of rounds kept by separate invocations, as the last line."""
    kept: list[tuple[str, Obj]] = []
    try:
        for name in files:
            kept.append((name, json.loads(Path(name).read_text())))
        described, rounds = combine(kept)
    except (OSError, ValueError) as error:  # json's errors are ValueErrors
        print(f"k8s_peers --summarize: {error}", file=sys.stderr)
        return 2
    commits = sorted({str(content.get("machine", {}).get("commit")) for _, content in kept})
    say(f"{len(rounds)} rounds from {len(kept)} files, commits {', '.join(commits)}")
    summary = summary_of(rounds, {**described, "runs": len(rounds)})
    summary.update(rounds=[r["run"] for r in rounds], commits=commits, results=files)
    print(json.dumps(summary))
    return 0


def print_table(files: list[str], make: Callable[[list[tuple[str, Obj]]], list[str]], flag: str) -> int:
    """``--table`` (``table_of``) and ``--trace-table`` (``trace_table``): docs/operator.md's table made by
    ``make`` from these kept raw files (markdown, on stdout)."""
    try:
        kept = [(name, json.loads(Path(name).read_text())) for name in files]
        print("\n".join(make(kept)))
    except (OSError, ValueError) as error:  # json's errors are ValueErrors
        print(f"k8s_peers {flag}: {error}", file=sys.stderr)
        return 2
    return 0


def stopped(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 nodes, 10 jobs of 4 pods, 10 s toleration")
    parser.add_argument("--nodes", type=int, default=None, help="kwok nodes (1000)")
    parser.add_argument("--jobs", type=int, default=None, help="jobs (500)")
    parser.add_argument("--pods", type=int, default=None, help="pods per job (8)")
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        help="rounds, each starting one entry further along (as many as entries, 5, so that each takes every "
        "position; quick 1)",
    )
    parser.add_argument(
        "--toleration",
        type=int,
        default=None,
        help="seconds every job's pods tolerate a NotReady node (300, the API server's default; quick 10)",
    )
    parser.add_argument("--hold", type=float, default=10, help="seconds a pod stays Terminating (10)")
    parser.add_argument(
        "--window",
        type=float,
        default=None,
        help="seconds to wait after the node loss (toleration + nodes down / 0.1 per s + 90)",
    )
    parser.add_argument(
        "--only",
        default=",".join(PEERS),
        help="comma-separated operators to run (trainguard,kubeflow,volcano)",
    )
    parser.add_argument(
        "--trainguard-on-kubeflows-crd",
        action="store_true",
        help="give trainguard Kubeflow's PyTorchJob CRD rather than its chart's (it refuses to start on it)",
    )
    parser.add_argument(
        "--first-run",
        type=int,
        default=1,
        help="the number of this invocation's first round (1): rounds taken by separate invocations, e.g. one "
        "per day at full size, go on rotating which operator goes first",
    )
    parser.add_argument(
        "--from-entry",
        type=int,
        default=1,
        help="start the first round at its Nth entry (1): an earlier invocation with the same --first-run took "
        "the entries before it, so that a round longer than a session is taken in parts",
    )
    parser.add_argument(
        "--summarize",
        nargs="+",
        metavar="KEPT",
        help="run nothing: the medians and ranges of the rounds in these kept raw files (same size each)",
    )
    parser.add_argument(
        "--table",
        nargs="+",
        metavar="KEPT",
        help="run nothing: print the table of docs/operator.md for the rounds in these kept raw files",
    )
    parser.add_argument(
        "--submit-trace",
        action="store_true",
        help="trace each submit (benchmarks/_submit_trace.py: when pods were created, bound and Running, each "
        "process's CPU, the API server's writes, a pod's stored size) into the raw JSON's submit_traces",
    )
    parser.add_argument(
        "--trace-table",
        nargs="+",
        metavar="KEPT",
        help="run nothing: print the table of docs/operator.md for the submits traced in these kept raw files",
    )
    parser.add_argument("--results", default=None, help="where to keep the raw JSON (benchmarks/results)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    if args.summarize:
        return summarize_kept(args.summarize)
    if args.table:
        return print_table(args.table, table_of, "--table")
    if args.trace_table:
        return print_table(args.trace_table, trace_table, "--trace-table")
    only = [name for name in args.only.split(",") if name]
    if unknown := set(only) - set(PEERS):
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}")
    defaults = (20, 10, 4, 1, 10) if args.quick else (1000, 500, 8, len(entries(only)), None)
    size = Size(
        nodes=args.nodes or defaults[0],
        jobs=args.jobs or defaults[1],
        pods=args.pods or defaults[2],
        toleration_s=args.toleration if args.toleration is not None else defaults[4],
        hold_s=args.hold,
        window_s=args.window,
    )
    runs = args.runs or defaults[3]
    if size.pods < 3:
        parser.error("--pods: at least 3 (a Master and two Workers)")
    try:
        taken = rounds_to_take(
            args.first_run, runs, args.from_entry, [f"{peer}/{mode}" for peer, mode in entries(only)]
        )
    except ValueError as error:
        parser.error(str(error))

    # Stopped (SIGTERM, or SIGINT where a shell started it in the background), it still stops the operators,
    # keeps the runs done and takes the cluster down.
    signal.signal(signal.SIGTERM, stopped)
    started = time.monotonic()
    at_start = machine()
    kubeflow_built = volcano_built = Path()
    if "kubeflow" in only:
        say("building Kubeflow's training operator (cached after the first time)")
        kubeflow_built = Path(
            subprocess.run(
                [str(SCRIPTS / "build-kubeflow")], stdout=subprocess.PIPE, text=True, check=True
            ).stdout.strip()
        )
    if "volcano" in only:
        volcano_built = volcano_build()
    kubeconfig = cluster_up()
    kube = Kube(kubeconfig)
    logs = Path(tempfile.mkdtemp(prefix="k8s-peers-"))
    raw: list[Obj] = []
    kept: Path | None = None
    described: Obj = {
        "nodes": size.nodes,
        "jobs": size.jobs,
        "pods_per_job": size.pods,
        "toleration_s": size.toleration_s if size.toleration_s is not None else 300,
        "toleration_set_in_pods": size.toleration_s is not None,
        "node_eviction_rate": DEFAULT_EVICTION_RATE,
        "nodes_down": size.nodes_down,
        "node_window_s": size.node_window_s,
        "hold_s": size.hold_s,
        "scale_by": size.scale_by,
        "runs": runs,
        # The submit and the recoveries of faults 2-4, in seconds (benchmarks/_peer_table.HUNDREDTHS).
        "seconds_kept_to": 0.01,
        "settings": settings_table(only),
        # Where benchmarks/against.py --same-script measures another commit's trainguard: that commit.
        "trainguard_under_test": under_test_commit(),
    }
    try:
        create(
            kube,
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        )
        # kwok would end Volcano's pods as a batch Job's (its Stage matches any owner of kind Job).
        kube.replace(POD_COMPLETE_STAGE, batch_jobs_only(kube.get(POD_COMPLETE_STAGE)))
        ours = kubeflow_crd(kubeflow_built) if args.trainguard_on_kubeflows_crd else pytorchjob_crd()
        makers: dict[str, Callable[[str], Operator]] = {
            "trainguard": lambda mode: trainguard_operator(kubeconfig, ours),
            "kubeflow": lambda mode: kubeflow_operator(kubeconfig, kubeflow_built, mode),
            "volcano": lambda mode: volcano_operator(kubeconfig, volcano_built, logs, mode),
        }
        for number, whole, here in taken:
            say(
                f"round {number}: {', '.join(whole)}"
                + (f" (entries {len(whole) - len(here) + 1} to {len(whole)} here)" if here != whole else "")
            )
            # Kept after each entry, so that a stopped invocation (a session's end) loses only the entry it was in.
            record: Obj = {
                "run": number,
                "order": whole,
                "entries": [],
                "figures": {},
                "load_average": None,
                "entry_wall_s": {},
            }
            raw.append(record)
            for entry in here:
                peer, mode = entry.split("/")
                entry_started = time.monotonic()
                trace = SubmitTrace(lambda: kube.text("/metrics")) if args.submit_trace else None
                figures = run_one(kube, makers[peer](mode), size, logs, trace)
                if "submit_trace" in figures:
                    record.setdefault("submit_traces", {})[entry] = figures.pop("submit_trace")
                record["figures"].setdefault(peer, {})[mode] = figures
                record["entry_wall_s"][entry] = round(time.monotonic() - entry_started, 1)
                if peer == "trainguard":
                    # Its settings are the same in both modes: one run stands under both.
                    record["figures"]["trainguard"]["equal"] = record["figures"]["trainguard"]["as_shipped"]
                record["entries"].append(entry)
                record["load_average"] = machine()["load_average"]
                kept = keep_rounds(kept, raw, at_start, described, args, time.monotonic() - started)
                say(f"raw figures so far: {kept}")
    finally:
        kube.close()
        if not args.keep:
            cluster_down()
        say(f"operators' logs: {logs}")
        if any(record["entries"] for record in raw):
            kept = keep_rounds(kept, raw, at_start, described, args, time.monotonic() - started)
            say(f"raw figures: {kept}")
    raw = [record for record in raw if record["entries"]]
    summary = summary_of(raw, described)
    summary.update(
        results=None if kept is None else str(kept.relative_to(ROOT) if kept.is_relative_to(ROOT) else kept),
        load_average_1m={"start": at_start["load_average"][0], "end": machine()["load_average"][0]},
        cpus=os.cpu_count(),
        commit=at_start["commit"],
        wall_s=round(time.monotonic() - started, 1),
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
