"""The node checker's checks, decided (``trainguard.policy.nodechecks``): a node whose latest check found its
hardware faulty is isolated, once per check, within the checker's share of the cluster's nodes; a check that
passed or found the environment wanting changes nothing; a node past the bound is refused, saying why."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.pod import checks
from trainguard.policy.nodechecks import NodeCheck, decide, latest


def check(node: str, at: float, verdict: str = checks.HARDWARE, item: str = "gpu.ecc") -> NodeCheck:
    value = 2.0 if verdict == checks.HARDWARE else 0.0
    items = (
        checks.CheckItem("host.cpu", checks.OK, 1.0, 0.2),
        checks.CheckItem(item, verdict, value, 0.0, "devices [1]"),
    )
    return NodeCheck(node, f"checker-{node}", checks.CheckResult(checks.PERIODIC, at, 0.3, items))


TEN = 10  # a cluster of ten nodes: the default share (0.1) allows one


@pytest.mark.parametrize(
    ("case", "given_checks", "isolated", "acted", "isolate", "refused", "settled"),
    [
        ("hardware isolates", [check("a", 5)], (), {}, ["a"], [], {}),
        ("a passing check changes nothing", [check("a", 5, checks.OK)], (), {}, [], [], {}),
        (
            "the environment changes nothing",
            [check("a", 5, checks.ENVIRONMENT, "host.write")],
            (),
            {},
            [],
            [],
            {},
        ),
        ("a check acted on is not again", [check("a", 5)], (), {"a": 5.0}, [], [], {}),
        ("a later check that fails is", [check("a", 6)], (), {"a": 5.0}, ["a"], [], {}),
        ("a node isolated already is settled", [check("a", 5)], ("a",), {}, [], [], {"a": 5.0}),
        ("the bound refuses the second", [check("a", 5), check("b", 4)], (), {}, ["b"], ["a"], {}),
        ("the bound counts every isolated node", [check("a", 5)], ("x",), {}, [], ["a"], {}),
        ("the latest check of a node counts", [check("a", 4), check("a", 6, checks.OK)], (), {}, [], [], {}),
    ],
)
def test_which_nodes_the_checkers_checks_isolate(
    case: str,
    given_checks: list[NodeCheck],
    isolated: tuple[str, ...],
    acted: dict[str, float],
    isolate: list[str],
    refused: list[str],
    settled: dict[str, float],
) -> None:
    verdicts = decide(given_checks, cluster_nodes=TEN, isolated=isolated, share=0.1, acted=acted)
    assert [v.node for v in verdicts.isolate] == isolate, case
    assert [v.node for v in verdicts.refused] == refused, case
    assert dict(verdicts.settled) == settled, case


def test_a_verdict_names_the_checker_the_item_and_its_reading_and_a_refusal_the_bound() -> None:
    verdicts = decide([check("a", 5), check("b", 7)], cluster_nodes=TEN, isolated=(), share=0.1, acted={})
    (isolated,) = verdicts.isolate
    assert (isolated.node, isolated.checker, isolated.at, isolated.item, isolated.value, isolated.threshold) == (
        "a", "checker-a", 5.0, "gpu.ecc", 2.0, 0.0,
    )  # fmt: skip
    assert isolated.refused is None
    assert (
        isolated.reason
        == "node a isolated: the node checker's check (checker-a) found gpu.ecc read 2 (threshold 0)"
    )
    (refused,) = verdicts.refused
    assert refused.refused is not None
    assert "more than 10% of the cluster's 10 nodes" in refused.reason
    assert "--node-checker-max-isolated-share: at most 1, 0 isolated now" in refused.reason


def test_at_least_one_node_may_be_isolated_in_a_small_cluster() -> None:
    verdicts = decide([check("a", 1)], cluster_nodes=3, isolated=(), share=0.1, acted={})
    assert [v.node for v in verdicts.isolate] == ["a"]


def test_of_two_checker_pods_on_a_node_the_newer_check_counts() -> None:
    old, new = check("a", 4), NodeCheck("a", "checker-new", check("a", 9).result)
    assert latest([new, old])["a"].checker == "checker-new"
    assert latest([old, new])["a"].checker == "checker-new"


@given(
    st.lists(
        st.tuples(
            st.sampled_from("abcdefgh"),
            st.floats(0, 100),
            st.sampled_from((checks.OK, checks.HARDWARE, checks.ENVIRONMENT)),
        ),
        max_size=24,
    ),
    st.sets(st.sampled_from("abcdefghxyz"), max_size=5),
    st.dictionaries(st.sampled_from("abcdefgh"), st.floats(0, 100), max_size=8),
    st.integers(1, 40),
    st.floats(0.01, 1.0),
)
def test_never_past_the_bound_only_fresh_hardware_checks_and_each_node_once(
    raw: list[tuple[str, float, str]],
    isolated: set[str],
    acted: dict[str, float],
    nodes: int,
    share: float,
) -> None:
    given_checks = [check(node, at, verdict) for node, at, verdict in raw]
    verdicts = decide(given_checks, cluster_nodes=nodes, isolated=isolated, share=share, acted=acted)
    newest = latest(given_checks)
    bound = max(1, int(share * nodes + 1e-9))
    chosen = [v.node for v in verdicts.isolate]
    assert len(set(chosen)) == len(chosen)
    assert not set(chosen) & isolated
    assert len(chosen) <= max(bound - len(isolated), 0)
    for verdict in (*verdicts.isolate, *verdicts.refused):
        found = newest[verdict.node].result
        assert found.verdict == checks.HARDWARE
        assert verdict.at == found.at > acted.get(verdict.node, float("-inf"))
    if verdicts.refused:  # refused only once the bound is reached
        assert len(isolated) + len(chosen) >= bound
    assert set(verdicts.settled) <= isolated
