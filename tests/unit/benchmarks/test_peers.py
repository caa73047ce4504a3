"""The pure parts of ``benchmarks/k8s_peers.py`` (``benchmarks/_peers.py``): the jobs each operator is given, what
is read from the watched pods, the operators' flags, the node-loss window and the figures of repeated runs."""

from __future__ import annotations

from typing import Any

import pytest
from benchmarks._peer_table import cell, digits_of
from benchmarks._peers import (
    HOLD_FINALIZER,
    KUBEFLOW,
    KUBEFLOW_EQUAL,
    TRAINGUARD,
    VOLCANO,
    VOLCANO_EQUAL,
    Pod,
    busiest,
    combine,
    every_position,
    eviction_window,
    job_names,
    kubeflow_flags,
    median,
    missing,
    order,
    positions,
    pytorchjob,
    pytorchjob_scaled,
    ratios,
    role_pod,
    role_pods,
    rounds_to_take,
    settings,
    spread,
    summarize,
    summary_of,
    targets,
    terminating,
    tolerations,
    volcano_flags,
    volcano_job,
    volcano_scaled,
)
from hypothesis import given
from hypothesis import strategies as st

from trainguard.api.load import load_object
from trainguard.backends.k8s.operator import Options
from trainguard.backends.k8s.shared import APPLY_CONCURRENCY

Obj = dict[str, Any]


def pod(name: str, node: str = "n1", phase: str = "Running", deleting: bool = False) -> Obj:
    meta: Obj = {"name": name, "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


# ---- the jobs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("elastic", [False, True])
def test_trainguard_reads_each_pytorchjob_as_a_job_of_its_pods(elastic: bool) -> None:
    loaded = load_object(pytorchjob("job-1", 4, elastic, toleration_s=30), "peers")
    assert loaded.dialect == "PyTorchJob"
    roles = loaded.job.spec.replica_specs.values()
    assert sum(role.replicas for role in roles) == 4
    # restartPolicy: ExitCode is trainguard's OnNodeFailWithExitCode, exit codes 128-255 retried.
    assert {role.restart_policy.value for role in roles} == {"OnNodeFailWithExitCode"}
    assert loaded.job.spec.retryable_exit_codes.ranges == ((128, 255),)
    assert all(role.template["spec"]["tolerations"] == tolerations(30) for role in roles)


@pytest.mark.parametrize(
    ("elastic", "roles"),
    [(False, {"Master": 1, "Worker": 3}), (True, {"Worker": 4})],
)
def test_pytorchjob_shapes(elastic: bool, roles: dict[str, int]) -> None:
    spec = pytorchjob("j", 4, elastic)["spec"]
    assert {name: r["replicas"] for name, r in spec["pytorchReplicaSpecs"].items()} == roles
    assert all(r["restartPolicy"] == "ExitCode" for r in spec["pytorchReplicaSpecs"].values())
    if elastic:
        # Room to scale out.
        assert spec["elasticPolicy"]["maxReplicas"] == 8


def test_volcano_job_is_a_launcher_and_workers_each_pod_replaced_alone() -> None:
    job = volcano_job("j", 4, toleration_s=30)
    spec = job["spec"]
    assert [(t["name"], t["replicas"]) for t in spec["tasks"]] == [("launcher", 1), ("worker", 3)]
    assert spec["minAvailable"] == 4
    assert spec["schedulerName"] == "volcano"
    # The pod's scope, as trainguard's rules and Kubeflow's ExitCode: a failed or deleted pod is replaced alone.
    assert spec["policies"] == [
        {"event": "PodFailed", "action": "RestartPod"},
        {"event": "PodEvicted", "action": "RestartPod"},
    ]
    for task in spec["tasks"]:
        assert "policies" not in task
        assert task["template"]["spec"]["restartPolicy"] == "Never"
        assert task["template"]["spec"]["tolerations"] == tolerations(30)


def test_tolerations_are_the_same_in_every_operators_pods() -> None:
    assert tolerations(None) == []
    assert {t["key"] for t in tolerations(30)} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
    for elastic in (False, True):
        for replica in pytorchjob("j", 4, elastic, 30)["spec"]["pytorchReplicaSpecs"].values():
            assert replica["template"]["spec"]["tolerations"] == tolerations(30)
        for replica in pytorchjob("j", 4, elastic)["spec"]["pytorchReplicaSpecs"].values():
            assert "tolerations" not in replica["template"]["spec"]


def test_scaling_changes_only_the_workers() -> None:
    assert pytorchjob_scaled(6) == {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 6}}}}
    job = volcano_job("j", 4)
    job["metadata"]["resourceVersion"] = "7"
    scaled = volcano_scaled(job, 5)
    assert [(t["name"], t["replicas"]) for t in scaled["spec"]["tasks"]] == [("launcher", 1), ("worker", 5)]
    assert scaled["metadata"]["resourceVersion"] == "7"
    assert job["spec"]["tasks"][1]["replicas"] == 3  # the one read is left as it was


@pytest.mark.parametrize(
    ("count", "fraction", "exit_code", "force_deleted", "scaled"),
    [
        (10, 0.1, ["job-0"], ["job-8"], ["job-9"]),
        (20, 0.1, ["job-0", "job-1"], ["job-18", "job-16"], ["job-19", "job-17"]),
        (1, 0.1, ["job-0"], ["job-0"], ["job-0"]),
    ],
)
def test_targets(
    count: int, fraction: float, exit_code: list[str], force_deleted: list[str], scaled: list[str]
) -> None:
    hit = targets(job_names(count), fraction)
    assert (hit.exit_code, hit.force_deleted, hit.scaled) == (exit_code, force_deleted, scaled)


# ---- what the pods say -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "job"),
    [
        ("job-1-master-0", "job-1"),
        ("job-1-worker-12", "job-1"),
        ("job-1-launcher-0", "job-1"),
        ("a-b-worker-worker-3", "a-b-worker"),
        ("job-1-rendezvous-0", None),  # trainguard's rendezvous pod
        ("job-1-worker", None),
        ("job-1-worker-x", None),
    ],
)
def test_role_pod_names(name: str, job: str | None) -> None:
    found = role_pod(pod(name))
    assert (found.job if found else None) == job


def test_what_a_pod_says() -> None:
    assert role_pod(pod("j-worker-0", node="n2", phase="Pending")) == Pod(
        "j-worker-0", "j", "uid-j-worker-0", "n2", False, False
    )
    unscheduled = {"metadata": {"name": "j-worker-0", "uid": "u"}}
    assert role_pod(unscheduled) == Pod("j-worker-0", "j", "u", "", False, False)
    objs = [pod("j-worker-0"), pod("j-worker-1", deleting=True), pod("j-rendezvous-0")]
    assert [p.name for p in role_pods(objs)] == ["j-worker-0"]
    assert [p.name for p in terminating(objs)] == ["j-worker-1"]


@pytest.mark.parametrize(
    ("objs", "expected", "down", "short"),
    [
        ([pod("a-worker-0"), pod("a-worker-1")], {"a": 2}, frozenset(), 0),
        ([pod("a-worker-0"), pod("a-worker-1", phase="Pending")], {"a": 2}, frozenset(), 1),
        ([pod("a-worker-0"), pod("a-worker-1", deleting=True)], {"a": 2}, frozenset(), 1),
        ([pod("a-worker-0"), pod("a-worker-1", node="n9")], {"a": 2}, frozenset({"n9"}), 1),
        ([pod("a-worker-0")], {"a": 1, "b": 3}, frozenset(), 3),
        # More than wanted (a scale-in not done yet) is not less missing elsewhere.
        ([pod("a-worker-0"), pod("a-worker-1")], {"a": 1, "b": 1}, frozenset(), 1),
    ],
)
def test_missing(objs: list[Obj], expected: dict[str, int], down: frozenset[str], short: int) -> None:
    pods = [role_pod(o) for o in objs]
    assert missing([p for p in pods if p is not None], expected, down) == short


def test_busiest_nodes_then_by_name() -> None:
    pods = role_pods([pod("a-worker-0", "n2"), pod("a-worker-1", "n2"), pod("b-worker-0", "n3")])
    assert busiest(["n1", "n2", "n3", "n4"], pods, 2) == ["n2", "n3"]
    assert busiest(["n4", "n1"], [], 1) == ["n1"]


def test_hold_finalizer_is_ours() -> None:
    assert HOLD_FINALIZER.startswith("trainguard.io/")


# ---- the operators' settings -------------------------------------------------------------------------


def test_settings_both_ways() -> None:
    assert settings("trainguard", "as_shipped") == settings("trainguard", "equal") == TRAINGUARD
    assert settings("kubeflow", "as_shipped") == KUBEFLOW
    assert settings("volcano", "as_shipped") == VOLCANO
    assert settings("kubeflow", "equal") == KUBEFLOW_EQUAL
    assert settings("volcano", "equal") == VOLCANO_EQUAL
    with pytest.raises(ValueError, match="unknown mode"):
        settings("kubeflow", "fast")


def test_equal_gives_each_peer_trainguards_means() -> None:
    # No client-side limit for anyone.
    for equal in (TRAINGUARD, KUBEFLOW_EQUAL, VOLCANO_EQUAL):
        assert (equal.qps, equal.burst) == (None, None)
    # trainguard's bound on requests in flight is its operator's own (--requests-in-flight), over its workers' status
    # writes and its apply threads together, and it runs as it ships.
    assert (TRAINGUARD.workers, TRAINGUARD.requests_in_flight) == (
        Options().workers,
        Options().requests_in_flight,
    )
    assert TRAINGUARD.requests_in_flight is not None
    assert TRAINGUARD.requests_in_flight <= TRAINGUARD.workers + APPLY_CONCURRENCY
    # Kubeflow sends a job's requests one after another: a thread for each request trainguard may have in flight.
    assert KUBEFLOW_EQUAL.job_pods == "one_at_a_time"
    assert KUBEFLOW_EQUAL.workers == KUBEFLOW_EQUAL.requests_in_flight == TRAINGUARD.requests_in_flight
    # Volcano sends a job's pods side by side, as trainguard: trainguard's workers.
    assert VOLCANO_EQUAL.job_pods == TRAINGUARD.job_pods == "side_by_side"
    assert VOLCANO_EQUAL.workers == TRAINGUARD.workers
    for equal in (TRAINGUARD, KUBEFLOW_EQUAL, VOLCANO_EQUAL, KUBEFLOW, VOLCANO):
        assert equal.as_json()["why"]


def test_flags() -> None:
    assert kubeflow_flags(KUBEFLOW) == [
        "--controller-threads",
        "1",
        "--kube-api-qps",
        "20",
        "--kube-api-burst",
        "30",
    ]
    assert kubeflow_flags(KUBEFLOW_EQUAL) == [
        "--controller-threads",
        "20",
        "--kube-api-qps",
        "100000",
        "--kube-api-burst",
        "100000",
    ]
    assert volcano_flags(VOLCANO) == ["--worker-threads=3", "--kube-api-qps=50", "--kube-api-burst=100"]
    assert volcano_flags(VOLCANO_EQUAL) == [
        "--worker-threads=4",
        "--kube-api-qps=100000",
        "--kube-api-burst=100000",
    ]


# ---- the node-loss window ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "down", "rate", "margin", "window"),
    [
        (300, 100, 0.1, 60, 300 + 990 + 60),  # full size, Kubernetes' defaults
        (10, 2, 0.1, 90, 10 + 10 + 90),  # --quick
        (30, 1, 0.1, 0, 30),  # the first node is tainted at once
        (0, 11, 1.0, 5, 15),
    ],
)
def test_eviction_window(toleration: float, down: int, rate: float, margin: float, window: float) -> None:
    assert eviction_window(toleration, down, rate, margin) == pytest.approx(window)


def test_eviction_window_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="positive"):
        eviction_window(30, 2, 0)
    with pytest.raises(ValueError, match="negative"):
        eviction_window(-1, 2)


@given(st.integers(0, 600), st.integers(1, 1000), st.integers(1, 1000))
def test_more_nodes_down_never_shortens_the_window(toleration: int, down: int, more: int) -> None:
    assert eviction_window(toleration, down + more) >= eviction_window(toleration, down) >= toleration


# ---- repeated runs -----------------------------------------------------------------------------------


def test_each_entry_goes_first_in_turn() -> None:
    entries = ["trainguard", "kubeflow/as_shipped", "kubeflow/equal"]
    firsts = [order(run, entries)[0] for run in range(3)]
    assert firsts == entries
    assert order(4, entries) == ["kubeflow/as_shipped", "kubeflow/equal", "trainguard"]
    assert order(0, []) == []


@given(st.integers(0, 50), st.lists(st.text(min_size=1), min_size=1, max_size=6, unique=True))
def test_order_is_a_rotation(run: int, entries: list[str]) -> None:
    assert sorted(order(run, entries)) == sorted(entries)


@given(st.integers(1, 20), st.lists(st.text(min_size=1), min_size=1, max_size=6, unique=True))
def test_as_many_rounds_as_entries_give_each_every_position(first: int, entries: list[str]) -> None:
    rounds = [order(run, entries) for run in range(first, first + len(entries))]
    taken = positions(rounds)
    assert every_position(taken)
    assert all(sorted(places) == list(range(1, len(entries) + 1)) for places in taken.values())


def test_fewer_rounds_than_entries_leave_positions_untaken() -> None:
    entries = ["trainguard/as_shipped", "kubeflow/as_shipped", "volcano/as_shipped", "kubeflow/equal"]
    taken = positions(order(run, entries) for run in range(3))
    assert taken["kubeflow/equal"] == [4, 3, 2]
    assert not every_position(taken)
    assert not every_position({})


@pytest.mark.parametrize(
    ("values", "middle", "ends"),
    [
        ([3.0], 3.0, [3.0, 3.0]),
        ([5.0, 1.0, 3.0], 3.0, [1.0, 5.0]),
        ([4.0, 1.0], 2.5, [1.0, 4.0]),
        ([1.0, None, 2.0], 2.0, [1.0, None]),  # one run not within the window
        ([None, None, 2.0], None, [2.0, None]),
        ([1.0, None], None, [1.0, None]),
        ([], None, [None, None]),
    ],
)
def test_median_and_spread(
    values: list[float | None], middle: float | None, ends: list[float | None]
) -> None:
    assert median(values) == middle
    assert spread(values) == ends


@pytest.mark.parametrize(
    ("described", "figure", "middle", "ends", "shown"),
    [
        ({}, "back_after_force_delete_s", 0.25, (0.2, 0.3), "0.2 s (0.2-0.3)"),  # a file kept to tenths
        ({"seconds_kept_to": 0.01}, "back_after_force_delete_s", 0.31, (0.21, 0.32), "0.31 s (0.21-0.32)"),
        ({"seconds_kept_to": 0.01}, "all_running_s", 7.0, (6.98, 8.59), "7.00 s (6.98-8.59)"),
        ({"seconds_kept_to": 0.01}, "cpu_s", 3.0, (2.9, 3.0), "3.0 s (2.9-3.0)"),  # kept to tenths there too
        ({"seconds_kept_to": 0.01}, "back_after_node_loss_s", 5.2, (5.0, 6.0), "5.2 s (5.0-6.0)"),
        ({"seconds_kept_to": 0.01}, "scaled_running_s", None, (None, None), "-"),
    ],
)
def test_a_cell_shows_a_figure_to_the_precision_its_raw_file_kept(
    described: dict[str, Any], figure: str, middle: float | None, ends: tuple[Any, Any], shown: str
) -> None:
    assert cell(middle, ends, " s", digits_of(described, figure)) == shown


@given(st.lists(st.floats(0, 1e4), min_size=1, max_size=9))
def test_the_median_lies_in_the_range(values: list[float]) -> None:
    low, high = spread(values)
    middle = median(values)
    assert low is not None
    assert high is not None
    assert middle is not None
    assert low <= middle <= high


def test_summarize_and_ratios() -> None:
    runs = [
        {
            "trainguard": {"as_shipped": {"all_running_s": 2.0, "note": "x"}},
            "kubeflow": {"equal": {"all_running_s": 8.0}},
        },
        {
            "trainguard": {"as_shipped": {"all_running_s": 4.0, "note": "y"}},
            "kubeflow": {"equal": {"all_running_s": None}},
        },
        {
            "trainguard": {"as_shipped": {"all_running_s": 3.0, "note": "z"}},
            "kubeflow": {"equal": {"all_running_s": 6.0}},
        },
    ]
    medians, ranges = summarize(runs)
    assert medians == {
        "trainguard": {"as_shipped": {"all_running_s": 3.0}},
        "kubeflow": {"equal": {"all_running_s": 8.0}},
    }
    assert ranges["kubeflow"]["equal"]["all_running_s"] == [6.0, None]
    compared = ratios(medians["trainguard"]["as_shipped"], medians["kubeflow"]["equal"])
    assert compared["all_running_s"] == 0.375
    assert compared["back_after_node_loss_s"] is None
    assert ratios({"cpu_s": 1.0}, {"cpu_s": 0})["cpu_s"] is None


def _kept(rounds: list[int], **size: Any) -> dict[str, Any]:
    described = {"nodes": 1000, "jobs": 500, "pods_per_job": 8, "toleration_s": 300, "nodes_down": 100}
    return {
        **described,
        **size,
        "machine": {"commit": "abc1234"},
        "runs_raw": [
            {"run": r, "figures": {"trainguard": {"as_shipped": {"cpu_s": float(r)}}}} for r in rounds
        ],
    }


def test_combine_joins_the_rounds_of_separate_invocations_in_round_order() -> None:
    described, rounds = combine([("b.json", _kept([3])), ("a.json", _kept([1, 2]))])
    assert [r["run"] for r in rounds] == [1, 2, 3]
    assert [r["kept_in"] for r in rounds] == ["a.json", "a.json", "b.json"]
    assert (described["nodes"], described["nodes_down"], described["toleration_s"]) == (1000, 100, 300)
    medians, _ = summarize([r["figures"] for r in rounds])
    assert medians["trainguard"]["as_shipped"]["cpu_s"] == 2.0


@pytest.mark.parametrize(
    ("kept", "message"),
    [
        ([], "no kept runs"),
        ([("a.json", {"nodes": 1000})], "a.json: no runs_raw"),
        (
            [("a.json", _kept([1])), ("b.json", _kept([2], nodes=100))],
            "b.json: nodes is 100 where a.json has 1000",
        ),
        (
            [("a.json", _kept([1])), ("b.json", _kept([2], toleration_s=10))],
            "b.json: toleration_s is 10 where a.json has 300",
        ),
        ([("a.json", _kept([1, 2])), ("b.json", _kept([2]))], "b.json: round 2 is also in a.json"),
    ],
)
def test_combine_refuses_runs_that_do_not_belong_together(kept: list[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        combine(kept)


# ---- a round taken in parts ----------------------------------------------------------------------------

ENTRIES = [
    "trainguard/as_shipped",
    "kubeflow/as_shipped",
    "volcano/as_shipped",
    "kubeflow/equal",
    "volcano/equal",
]


def test_a_round_is_taken_from_its_kth_entry_and_the_next_rounds_whole() -> None:
    taken = rounds_to_take(2, 2, 3, ENTRIES)
    assert [number for number, _, _ in taken] == [2, 3]
    _, whole, here = taken[0]
    assert whole == order(1, ENTRIES)
    assert here == whole[2:]
    assert taken[1][1] == taken[1][2] == order(2, ENTRIES)
    assert rounds_to_take(1, 1, 1, ENTRIES) == [(1, ENTRIES, ENTRIES)]


@pytest.mark.parametrize(
    ("first_run", "from_entry", "message"),
    [(0, 1, "--first-run is 0"), (1, 0, "--from-entry is 0: .* 1 to 5"), (1, 6, "--from-entry is 6")],
)
def test_a_part_outside_the_round_is_refused(first_run: int, from_entry: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rounds_to_take(first_run, 1, from_entry, ENTRIES)


@given(st.integers(1, 20), st.integers(1, 5))
def test_the_parts_of_a_round_are_the_round(first_run: int, cut: int) -> None:
    ((_, whole, first_part),) = rounds_to_take(first_run, 1, 1, ENTRIES)
    ((_, same, rest),) = rounds_to_take(first_run, 1, cut, ENTRIES)
    assert same == whole == first_part
    assert whole[: cut - 1] + rest == whole


def _part(number: int, entries: list[str], **figures: float) -> dict[str, Any]:
    """A kept file holding the given entries of round ``number``, each peer's figure the same in its modes."""
    taken: dict[str, dict[str, Any]] = {}
    for entry in entries:
        peer, mode = entry.split("/")
        taken.setdefault(peer, {})[mode] = {"cpu_s": figures[peer]}
    round_ = {"run": number, "order": order(number - 1, ENTRIES), "entries": entries, "figures": taken}
    return {**_kept([]), "runs_raw": [round_]}


def test_combine_joins_the_parts_of_one_round() -> None:
    whole = order(0, ENTRIES)
    first = _part(1, whole[:2], trainguard=1.0, kubeflow=9.0)
    rest = _part(1, whole[2:], volcano=5.0, kubeflow=8.0)
    _, rounds = combine([("b.json", rest), ("a.json", first)])
    assert len(rounds) == 1
    joined = rounds[0]
    assert joined["entries"] == whole
    assert joined["kept_in"] == "b.json + a.json"
    assert joined["figures"]["kubeflow"] == {"as_shipped": {"cpu_s": 9.0}, "equal": {"cpu_s": 8.0}}
    assert joined["figures"]["volcano"] == {"as_shipped": {"cpu_s": 5.0}, "equal": {"cpu_s": 5.0}}
    # The files' own rounds are left as they were.
    assert set(first["runs_raw"][0]["figures"]) == {"trainguard", "kubeflow"}


def test_combine_refuses_parts_that_overlap_or_differ_in_order() -> None:
    whole = order(0, ENTRIES)
    first = _part(1, whole[:3], trainguard=1.0, kubeflow=9.0, volcano=5.0)
    with pytest.raises(
        ValueError, match=r"b\.json: round 1's kubeflow/as_shipped, volcano/as_shipped is also in a\.json"
    ):
        combine([("a.json", first), ("b.json", _part(1, whole[1:], kubeflow=8.0, volcano=4.0))])
    other = _part(1, whole[3:], kubeflow=8.0, volcano=4.0)
    other["runs_raw"][0]["order"] = order(1, ENTRIES)
    with pytest.raises(ValueError, match=r"b\.json: round 1 is also in a\.json"):
        combine([("a.json", first), ("b.json", other)])


def test_a_round_taken_in_part_is_summarized_with_the_modes_it_has() -> None:
    figures = {
        "trainguard": {"as_shipped": {"all_running_s": 2.0}, "equal": {"all_running_s": 2.0}},
        "kubeflow": {"as_shipped": {"all_running_s": 8.0}, "equal": {"all_running_s": 1.0}},
        "volcano": {"as_shipped": {"all_running_s": 4.0}},  # its "equal" entry not taken yet
    }
    summary = summary_of([{"run": 1, "figures": figures}], {"runs": 1})
    assert summary["ratio"]["kubeflow"]["equal"]["all_running_s"] == 2.0
    assert summary["ratio"]["volcano"]["as_shipped"]["all_running_s"] == 0.5
    assert "equal" not in summary["ratio"]["volcano"]
    assert summary["runs"] == 1
