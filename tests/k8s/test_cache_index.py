"""The watch cache's label index: ``select`` by the indexed label sees exactly what a scan would, through
writes, relabels, deletions and relists (no cluster needed: the maps are driven directly)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from trainguard.backends.k8s.cache import Cache

LABEL = "trainguard.io/job"


def _pod(ns: str, name: str, job: str | None, version: int) -> dict[str, Any]:
    labels = {LABEL: job} if job is not None else {}
    return {"metadata": {"namespace": ns, "name": name, "labels": labels, "resourceVersion": str(version)}}


def _scan(cache: Cache, ns: str, job: str) -> set[str]:
    return {
        o["metadata"]["name"]
        for o in cache.items()
        if o["metadata"]["namespace"] == ns and o["metadata"]["labels"].get(LABEL) == job
    }


operations = st.lists(
    st.tuples(
        st.sampled_from(["put", "store", "drop"]),
        st.sampled_from(["a", "b"]),
        st.sampled_from(["p0", "p1", "p2", "p3"]),
        st.sampled_from(["j0", "j1", None]),
    ),
    max_size=40,
)


@given(operations)
def test_select_by_the_indexed_label_agrees_with_a_scan(ops: list[tuple[str, str, str, str | None]]) -> None:
    cache = Cache(None, "/api/v1/pods", lambda obj, now: None, index_label=LABEL)  # type: ignore[arg-type]
    for version, (op, ns, name, job) in enumerate(ops, start=1):
        pod = _pod(ns, name, job, version)
        if op == "put":
            cache.put(pod)
        elif op == "store":
            with cache._lock:
                cache._store(pod)
        else:
            with cache._lock:
                cache._drop(pod)
    for ns in ("a", "b"):
        for job in ("j0", "j1"):
            selected = {o["metadata"]["name"] for o in cache.select(ns, {LABEL: job})}
            assert selected == _scan(cache, ns, job)


def test_an_older_write_does_not_replace_a_newer_view() -> None:
    cache = Cache(None, "/api/v1/pods", lambda obj, now: None, index_label=LABEL)  # type: ignore[arg-type]
    cache.put(_pod("a", "p", "j0", 5))
    cache.put(_pod("a", "p", "j1", 4))
    assert [o["metadata"]["labels"][LABEL] for o in cache.select("a", {LABEL: "j0"})] == ["j0"]
    assert cache.select("a", {LABEL: "j1"}) == []
