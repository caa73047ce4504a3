"""The local runtime's virtual nodes as fault tolerance checks leave them (``backends.local.nodes``), in a real
SQLite file: an isolated node keeps its first reason, takes no pod and no room, survives the resizing of the
node pool, and is released by command; injected faults are kept per node, ahead of the node too."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.controller.harness import make_job

from trainguard.backends.local import nodes
from trainguard.backends.local.capacity import ensure_free, ensure_nodes
from trainguard.backends.local.home import Home
from trainguard.backends.local.placement import pick, room
from trainguard.backends.local.records import NodeRecord
from trainguard.backends.local.store import Store

pytestmark = pytest.mark.integration


@pytest.fixture
def store(tmp_path: Path) -> Store:
    opened = Store(tmp_path / "state.db")
    opened.add_nodes([NodeRecord(f"node-{i}", 1) for i in range(3)])
    return opened


def test_an_isolated_node_takes_no_pod_until_released(store: Store) -> None:
    assert nodes.isolate(store, "node-0", "job a/pod a-0: gpu.ecc read 2 (threshold 0)")
    assert not nodes.isolate(store, "node-0", "a second reason")  # isolated already: the first reason stays
    isolated = store.get_node("node-0")
    assert isolated is not None
    assert isolated.isolated == "job a/pod a-0: gpu.ecc read 2 (threshold 0)"
    listed = store.list_nodes()
    free = {node.name: 1 for node in listed}
    assert pick(listed, free) == "node-1"
    assert room(listed, free) == 2
    assert "released" in nodes.release(store, "node-0")
    assert "not isolated" in nodes.release(store, "node-0")
    listed = store.list_nodes()
    assert room(listed, {node.name: 1 for node in listed}) == 3


def test_the_node_pool_grows_around_isolated_nodes_and_keeps_them_isolated(store: Store) -> None:
    nodes.isolate(store, "node-1", "bad")
    ensure_free(store, 3)  # three free slots wanted: node-1 does not count, a new node is made
    assert [node.name for node in store.list_nodes()] == ["node-0", "node-1", "node-2", "node-3"]
    ensure_nodes(store, make_job(), 4, 100)  # resized to more slots per node: still isolated
    assert store.get_node("node-1").isolated == "bad"  # type: ignore[union-attr]


def test_faults_are_injected_per_node_even_ahead_of_the_node(tmp_path: Path, store: Store) -> None:
    home = Home(tmp_path / "home")
    assert "gpu.ecc" in nodes.inject(home, store, "node-2", None)
    nodes.inject(home, store, "node-2", "host.disk")
    assert (home.injected_faults / "node-2").read_text().split() == ["gpu.ecc", "host.disk"]
    assert "not there yet" in nodes.inject(home, store, "node-7", "gpu.lost")
    with pytest.raises(nodes.NodeError, match="unknown check item 'bogus'"):
        nodes.inject(home, store, "node-2", "bogus")
    with pytest.raises(nodes.NodeError, match="no node 'gpu7'; the nodes are node-0, node-1, node-2"):
        nodes.inject(home, store, "gpu7", None)
    nodes.repair(home, store, "node-2")
    assert not (home.injected_faults / "node-2").exists()
