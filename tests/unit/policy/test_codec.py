"""StateCodec gives what PolicyState.to_dict/from_dict give, value for value and type for type, whatever it
remembers: across a sequence of states that share most of their pods, after entries are changed in place,
and whether what it reads is what it wrote or a copy; and it remembers no more than the job's latest entries."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from trainguard.policy import PodCounters, PodRef, PolicyState
from trainguard.policy.codec import StateCodec

refs = st.builds(PodRef, st.sampled_from(["worker", "launcher", "ps"]), st.integers(0, 6))
times = st.one_of(st.none(), st.integers(0, 100), st.floats(0, 1e6, allow_nan=False))
counters = st.builds(
    PodCounters,
    restarts=st.integers(0, 5),
    consecutive_hangs=st.integers(0, 3),
    backoff_streak=st.integers(0, 3),
    last_restart_at=times,
    running_since=times,
)
states = st.builds(
    PolicyState,
    counted_restarts=st.dictionaries(
        st.sampled_from(["worker", "ps"]), st.lists(st.floats(0, 1e4, allow_nan=False)).map(tuple)
    ),
    role_restarts=st.dictionaries(st.sampled_from(["worker", "ps"]), st.integers(0, 9)),
    job_restarts=st.integers(0, 9),
    pods=st.dictionaries(refs, counters, max_size=12),
    failed_pods=st.frozensets(refs, max_size=3),
    failed_roles=st.dictionaries(st.sampled_from(["worker", "ps"]), st.text(max_size=5)),
    job_failure=st.one_of(st.none(), st.text(max_size=5)),
)
#: A change of one pod's counters, or of a job counter: what a reconcile does to the state.
changes = st.one_of(
    st.tuples(st.just("pod"), refs, counters),
    st.tuples(st.just("job"), st.integers(0, 9), st.none()),
)


def exact(value: Any) -> str:
    """JSON tells 5 from 5.0, and keeps the order of keys and entries."""
    return json.dumps(value)


def apply(state: PolicyState, change: tuple[Any, ...]) -> PolicyState:
    kind, first, second = change
    if kind == "pod":
        return state.with_pod(first, second)
    return replace(state, job_restarts=first)


@given(states, st.lists(changes, max_size=8), st.lists(st.booleans(), min_size=9, max_size=9))
def test_a_chain_of_reconciles_reads_and_writes_what_the_plain_codec_does(
    start: PolicyState, steps: list[tuple[Any, ...]], copied: list[bool]
) -> None:
    codec = StateCodec()
    state = start
    for change, copy in zip([None, *steps], copied, strict=False):
        if change is not None:
            state = apply(state, change)
        saved = codec.to_dict(state)
        assert exact(saved) == exact(state.to_dict())
        # The status read back as written (kept by the operator), or its copy brought by the watch.
        restored = codec.from_dict(json.loads(json.dumps(saved)) if copy else saved)
        plain = PolicyState.from_dict(json.loads(json.dumps(saved)))
        assert restored == plain
        assert exact(restored.to_dict()) == exact(plain.to_dict())
        assert list(restored.pods) == list(plain.pods)
        state = restored  # the next reconcile starts from what was read


@given(states, st.data())
def test_an_entry_changed_in_place_is_read_again(state: PolicyState, data: st.DataObject) -> None:
    codec = StateCodec()
    saved = codec.to_dict(state)
    codec.from_dict(saved)
    if not saved["pods"]:
        return
    entry = data.draw(st.sampled_from(saved["pods"]))
    entry["restarts"] += 1
    entry["runningSince"] = 7
    assert codec.from_dict(saved) == PolicyState.from_dict(json.loads(json.dumps(saved)))


@given(states)
def test_a_written_entry_changed_in_place_is_written_again(state: PolicyState) -> None:
    codec = StateCodec()
    restored = codec.from_dict(codec.to_dict(state))
    first = codec.to_dict(restored)
    for entry in first["pods"]:
        entry["restarts"] = -1
    assert exact(codec.to_dict(restored)) == exact(restored.to_dict())


def test_unchanged_pods_are_neither_written_nor_parsed_again() -> None:
    """What makes it fast: the second reconcile reuses the entries of the first."""
    codec = StateCodec()
    state = PolicyState(pods={PodRef("worker", i): PodCounters(restarts=i) for i in range(50)})
    first = codec.to_dict(codec.from_dict(codec.to_dict(state)))
    restored = codec.from_dict(first)
    changed = restored.with_pod(PodRef("worker", 3), PodCounters(restarts=9))
    second = codec.to_dict(changed)
    reused = [a is b for a, b in zip(first["pods"], second["pods"], strict=True)]
    assert reused.count(False) == 1
    assert not reused[3]
    again = codec.from_dict(second)
    assert all(again.pods[ref] is restored.pods[ref] for ref in restored.pods if ref.index != 3)


def test_what_it_remembers_is_the_latest_entries_only() -> None:
    """A job of 50 pods, its status written and then read back 100 times as a watch brings it (a copy each
    time, one pod changed each time): the tables hold about one version's entries, not every version's."""
    codec = StateCodec()
    pods = 50
    state = PolicyState(pods={PodRef("worker", i): PodCounters(restarts=0) for i in range(pods)})
    for version in range(100):
        saved = json.loads(json.dumps(codec.to_dict(state)))
        state = codec.from_dict(saved).with_pod(
            PodRef("worker", version % pods), PodCounters(restarts=version)
        )
        assert len(codec._written) <= pods
        assert len(codec._read) <= 2 * pods
    restored = codec.from_dict(saved)
    again = codec.to_dict(restored)
    assert all(a is b for a, b in zip(again["pods"], codec.to_dict(restored)["pods"], strict=True))
