"""``benchmarks/_submit_trace.py``: the API server's writes read from its metrics, each process's CPU from a
``/proc`` of the test's own, and a submit's pods timed from what the watch brought."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from benchmarks import _submit_trace
from benchmarks._submit_trace import (
    SubmitTrace,
    api_reads,
    api_writes,
    process_cpu,
    trace_table,
    watch_bytes,
    watch_events,
)

METRICS = """\
# HELP apiserver_request_total Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 40
apiserver_request_total{code="409",component="apiserver",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="201",component="apiserver",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 40
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 44
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 3
apiserver_request_total_other{verb="POST",resource="pods"} 99
apiserver_request_total{code="200",component="apiserver",group="",resource="nodes",scope="cluster",subresource="",verb="GET",version="v1"} 5
apiserver_watch_events_total{group="",kind="Pod",version="v1",resource="pods"} 300
apiserver_watch_events_total{group="",kind="Node",version="v1",resource="nodes"} 20
apiserver_watch_events_sizes_sum{group="",kind="Pod",version="v1",resource="pods"} 1.5e+06
apiserver_watch_events_sizes_count{group="",kind="Pod",version="v1",resource="pods"} 300
"""


def test_api_writes_sum_the_codes_and_leave_reads_out() -> None:
    assert api_writes(METRICS) == {"POST pods": 42.0, "POST pods/binding": 40.0, "PATCH pods/status": 44.0}


def test_reads_and_watch_events_are_counted_apart() -> None:
    assert api_reads(METRICS) == {"LIST pods": 7.0, "GET nodes": 5.0}
    assert watch_events(METRICS) == {"pods": 300.0, "nodes": 20.0}
    assert watch_bytes(METRICS) == {"pods": 1.5e6}


def _stat(pid: int, comm: str, utime: int, stime: int) -> str:
    # pid (comm) state ppid ... : utime and stime are fields 14 and 15 (the 12th and 13th after the name)
    rest = ["S", "1", *["0"] * 9, str(utime), str(stime), *["0"] * 10]
    return f"{pid} ({comm}) {' '.join(rest)}\n"


def test_process_cpu_sums_by_name_even_names_with_spaces_and_parentheses(tmp_path: Path) -> None:
    tick = _submit_trace.os.sysconf("SC_CLK_TCK")
    for pid, comm, user, system in (
        (10, "etcd", 3 * tick, tick),
        (11, "a (b) c", tick, 0),
        (12, "etcd", tick, 0),
    ):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_stat(pid, comm, user, system))
    (tmp_path / "13").mkdir()  # ended between the listing and the read
    (tmp_path / "self").mkdir()
    assert process_cpu(str(tmp_path)) == {"etcd": 5.0, "a (b) c": 1.0}


def _pod(name: str, node: str | None = None, phase: str = "Pending") -> dict[str, Any]:
    managed = [{"manager": "op", "fieldsV1": {"f:spec": {}}}]
    return {
        "metadata": {"name": name, "managedFields": managed},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def test_a_submits_pods_are_timed_from_its_start(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 100.5, 101.0, 102.0, 102.5, 103.0, 104.0, 110.0]).__next__
    monkeypatch.setattr(_submit_trace.time, "monotonic", clock)
    monkeypatch.setattr(_submit_trace, "process_cpu", lambda: {})
    writes = iter([METRICS, METRICS.replace("} 40", "} 48").replace("} 300", "} 340")])
    trace = SubmitTrace(lambda: next(writes))
    trace.seen(_pod("before"), None)  # before the submit: not counted
    trace.start()  # 100.0
    trace.seen(_pod("a"), None)  # created at 0.5
    trace.seen(_pod("b"), None)  # created at 1.0
    trace.seen(_pod("a", "n1"), None)  # bound at 2.0
    trace.seen(_pod("a", "n1", "Running"), None)  # running at 2.5
    trace.seen(_pod("b", "n2", "Running"), None)  # bound and running at 3.0
    trace.seen(_pod("a", "n1", "Running"), None)  # seen again at 4.0: nothing changes
    got = trace.finish()  # 110.0
    assert got["seconds"] == 10.0
    assert got["pods"] == 2
    assert got["created_s"] == {"p50": 0.75, "p90": 1.0, "last": 1.0}
    assert got["bound_to_running_s"] == {"p50": 0.25, "p90": 0.5, "last": 0.5}
    assert got["created_to_bound_s"] == {"p50": 1.75, "p90": 2.0, "last": 2.0}
    assert got["api_writes"] == {"POST pods": 8, "POST pods/binding": 8}
    assert got["api_writes_total"] == 16
    assert (got["api_reads"], got["watch_events"]) == ({}, {"pods": 40})
    assert got["pod_managed_fields_bytes"] == len('[{"manager":"op","fieldsV1":{"f:spec":{}}}]')


def _trace(seconds: float, apiserver: float, operator: str) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "created_s": {"p50": 1.0, "p90": 2.0, "last": 3.0},
        "cpu_s": {"kube-apiserver": apiserver, operator: 1.5},
        "api_writes": {"POST pods": 400, "PUT pytorchjobs/status": 150},
        "api_writes_total": 550,
        "pod_bytes": 4000,
    }


def test_the_trace_table_gives_each_entrys_median_and_range_over_its_rounds() -> None:
    rounds = [
        {"run": 1, "submit_traces": {"trainguard/as_shipped": _trace(8.0, 7.0, "trainguard"),
                                     "kubeflow/equal": _trace(6.0, 6.0, "training-operat"),
                                     "volcano/equal": _trace(5.0, 5.0, "vc-scheduler")}},
        {"run": 2, "submit_traces": {"trainguard/as_shipped": _trace(10.0, 9.0, "trainguard")}},
        {"run": 3},  # taken without --submit-trace
    ]  # fmt: skip
    lines = trace_table([("k.json", {"runs_raw": rounds})])
    assert lines[2] == "| traced at submit | trainguard | Kubeflow equal | Volcano equal |"
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[4:]]
    rows = {label: rest for label, *rest in cells}
    assert rows["submit -> all Running"] == ["9.00 s (8.00-10.00)", "6.00 s", "5.00 s"]
    assert rows["CPU: kube-apiserver"] == ["8.00 s (7.00-9.00)", "6.00 s", "5.00 s"]
    # Each its own process; Volcano's controller manager's was not kept (only its scheduler's): not a zero.
    assert rows["CPU: the operator"] == ["1.50 s", "1.50 s", "-"]
    assert rows["... jobs' status written"] == ["150", "150", "150"]
    assert rows["... Events"] == ["-", "-", "-"]  # none written, or not traced
    assert rows["... its managed fields"] == ["-", "-", "-"]


def test_files_without_traces_are_refused() -> None:
    with pytest.raises(ValueError, match=r"k\.json: no submit_traces"):
        trace_table([("k.json", {"runs_raw": [{"run": 1}]})])
