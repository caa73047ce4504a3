"""The local runtime's virtual nodes as fault tolerance checks leave them: isolated (no pod placed there
again, for any job, later ones too) until released, and faulty on purpose (``trainguard chaos
hardware-fault``: the checks of the pods there read the items given as faulty).

An isolated node keeps its reason: the job and pod whose check found it, the item and the value.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import replace

from trainguard.backends.local.home import Home
from trainguard.backends.local.records import NodeRecord
from trainguard.backends.local.statefile import Conflict
from trainguard.backends.local.store import Store
from trainguard.pod.checks import ITEMS

#: How the local runtime names its nodes.
_NODE_NAME = re.compile(r"node-[0-9]{1,6}")
#: The item a hardware fault is injected as when none is named.
DEFAULT_ITEM = "gpu.ecc"


class NodeError(ValueError):
    """A node command that cannot be carried out (an unknown node, an unknown item): a message for users."""


def _node(store: Store, name: str) -> NodeRecord:
    found = store.get_node(name)
    if found is None:
        raise NodeError(f"no node {name!r}; {_nodes_now(store)}")
    return found


def _nodes_now(store: Store) -> str:
    names = ", ".join(node.name for node in store.list_nodes())
    if not names:
        return "there are no nodes yet: the local runtime makes them for the jobs it runs"
    return f"the nodes are {names} (trainguard get nodes)"


def isolate(store: Store, name: str, reason: str) -> bool:
    """Isolate ``name`` with ``reason``; False where it already was (its first reason is kept)."""
    for _ in range(5):  # another writer changed the row meanwhile: read it again
        node = _node(store, name)
        if node.isolated:
            return False
        with contextlib.suppress(Conflict):
            store.update_node(replace(node, isolated=reason or "isolated"))
            return True
    raise NodeError(f"node {name} kept changing while it was being isolated; try again")


def release(store: Store, name: str) -> str:
    """Release an isolated node: pods may be placed there again."""
    for _ in range(5):
        node = _node(store, name)
        if not node.isolated:
            return f"node {name} is not isolated; nothing to do"
        with contextlib.suppress(Conflict):
            store.update_node(replace(node, isolated=""))
            return f"node {name} released: pods may be placed there again (it was isolated: {node.isolated})"
    raise NodeError(f"node {name} kept changing while it was being released; try again")


def inject(home: Home, store: Store, name: str, item: str | None) -> str:
    """Make the checks on node ``name`` read ``item`` as faulty (a test aid). A node the runtime has not made
    yet (``node-<n>``, as it names them) may be given: its checks read it once it is there."""
    known = store.get_node(name) is not None
    if not known and not _NODE_NAME.fullmatch(name):
        raise NodeError(f"no node {name!r}; {_nodes_now(store)}")
    chosen = item or DEFAULT_ITEM
    if chosen not in ITEMS:
        raise NodeError(f"unknown check item {chosen!r}; the items are {', '.join(sorted(ITEMS))}")
    folder = home.injected_faults
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    items = set(path.read_text().split()) if path.exists() else set()
    items.add(chosen)
    temporary = path.with_suffix(".tmp")
    temporary.write_text("\n".join(sorted(items)) + "\n")
    temporary.replace(path)
    ahead = "" if known else " (it is not there yet: from when the runtime makes it)"
    return (
        f"node {name}: the fault tolerance checks of its pods now read {chosen} as faulty "
        f"(pre-check of new pods, periodic and post-checks of running ones){ahead}"
    )


def repair(home: Home, store: Store, name: str) -> str:
    """Undo ``inject`` on ``name``: its checks read the real machine again."""
    with contextlib.suppress(FileNotFoundError):
        (home.injected_faults / name).unlink()
    return f"node {name}: no injected fault left"
