"""Faults on purpose: what ``trainguard chaos`` does to local pods and nodes.

Each fault looks to the controller exactly like the real thing: a killed process reports its signal, an
evicted pod ends with reason Evicted, a force-deleted pod disappears, a node that goes down takes its pods'
processes with it (the machine is gone) and reports NotReady.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from dataclasses import replace

import psutil

from trainguard.agent.control import write_exit_request
from trainguard.agent.nudge import workers
from trainguard.backends.local import processes
from trainguard.backends.local.records import EventRecord, NodeRecord, PodRecord, PodState
from trainguard.backends.local.runtime import Runtime
from trainguard.pod import contract
from trainguard.pod.livelaunch import started_as_spare


class ChaosError(ValueError):
    """The fault cannot be injected (unknown pod, pod not running, ...): a message for the user."""


def running_pod(runtime: Runtime, name: str) -> tuple[PodRecord, psutil.Process]:
    row = runtime.store.get_pod(name)
    if row is None or row.state is PodState.DELETED:
        raise ChaosError(f"no pod {name!r}; see 'trainguard get JOB -o wide' for pod names")
    leader = processes.find(row.pid, row.create_time) if row.state is PodState.RUNNING else None
    if leader is None:
        raise ChaosError(f"pod {name} is not running (it is {row.state.value}); nothing to do")
    return row, leader


def _command_group(runtime: Runtime, row: PodRecord) -> int:
    child = runtime.report(row).child_pid
    if not child:
        raise ChaosError(f"pod {row.name} is still starting its command; try again in a moment")
    return child


def kill(
    runtime: Runtime, name: str, signum: int | None = None, exit_code: int | None = None, worker: bool = False
) -> str:
    """Kill the pod's training command (not its agent) with a signal, or make the pod end with ``exit_code``;
    with ``worker``, one training process alone (a worker that crashed; its launcher lives on).

    An exit code is asked of the pod's agent (``trainguard.agent.control``): it stops the command and exits
    with that code itself, so the pod really ends with it, as its report and wait status both say.
    """
    row, _ = running_pod(runtime, name)
    group = _command_group(runtime, row)
    if worker:
        return _kill_worker(runtime, row, group, signum if signum is not None else signal.SIGKILL)
    if exit_code is not None:
        write_exit_request(runtime.home.control_file(row.job, row.name), exit_code)
        what = f"exit code {exit_code}"
    else:
        sig = signum if signum is not None else signal.SIGKILL
        for target in (signal.SIGCONT, sig):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, target)
        what = signal.Signals(sig).name
    _event(runtime, row, "ChaosKill", f"chaos: killed the command of {name} ({what})")
    return f"pod {name}: command killed ({what})"


def _kill_worker(runtime: Runtime, row: PodRecord, command: int, signum: int) -> str:
    """Signal the first of the pod's workers that holds a rank (a live job's hot spares, waiting, are not)."""
    ranked = sorted(
        (w for w in workers(command) if not started_as_spare(w.pid)),
        key=lambda w: (_local_rank(w.pid), w.pid),
    )
    if not ranked:
        raise ChaosError(f"pod {row.name} runs no training process yet; try again in a moment")
    victim = ranked[0]
    with contextlib.suppress(ProcessLookupError):
        os.kill(victim.pid, signum)
    what = signal.Signals(signum).name
    _event(runtime, row, "ChaosKill", f"chaos: killed worker pid {victim.pid} of {row.name} ({what})")
    return f"pod {row.name}: worker pid {victim.pid} killed ({what}); its launcher goes on"


def _environ(pid: int) -> dict[str, str]:
    with contextlib.suppress(psutil.Error):
        return dict(psutil.Process(pid).environ())
    return {}


def _local_rank(pid: int) -> int:
    text = _environ(pid).get(contract.LOCAL_RANK, "")
    return int(text) if text.isdigit() else 0


def hang(runtime: Runtime, name: str) -> str:
    """SIGSTOP the pod's training process tree; the agent stays awake to notice."""
    row, leader = running_pod(runtime, name)
    _command_group(runtime, row)
    processes.signal_tree(leader, signal.SIGSTOP, include_leader=False)
    _event(runtime, row, "ChaosHang", f"chaos: stopped the processes of {name} (SIGSTOP)")
    return f"pod {name}: training processes stopped (SIGSTOP)"


def evict(runtime: Runtime, name: str, grace_seconds: float) -> str:
    """Evict the pod: SIGTERM, grace, SIGKILL; it ends with reason Evicted."""
    row, leader = running_pod(runtime, name)
    with contextlib.suppress(psutil.Error):
        leader.send_signal(signal.SIGTERM)
    processes.signal_tree(leader, signal.SIGCONT, include_leader=False)
    runtime.store.update_pod(
        replace(
            row,
            injected={"launch": row.launch, "reason": "Evicted"},
            stop_deadline=runtime.clock() + grace_seconds,
        )
    )
    _event(runtime, row, "Evicted", f"chaos: evicting {name}")
    return f"pod {name}: evicted"


def force_delete(runtime: Runtime, name: str) -> str:
    """Delete the pod with grace 0, without trainguard's intent: it simply disappears."""
    row = runtime.store.get_pod(name)
    if row is None or row.state is PodState.DELETED:
        raise ChaosError(f"no pod {name!r}; see 'trainguard get JOB -o wide' for pod names")
    runtime.kill_now(row)
    runtime.store.update_pod(
        replace(runtime.store.get_pod(name) or row, state=PodState.DELETED, deleted_by_us=False)
    )
    _event(runtime, row, "ChaosForceDelete", f"chaos: force-deleted {name}")
    return f"pod {name}: force-deleted"


def node_down(runtime: Runtime, node: str) -> str:
    """The node stops being Ready and its pods' processes die with it."""
    record = _node(runtime, node)
    if record.ready:
        runtime.store.update_node(replace(record, ready=False))
    lost = []
    for row in runtime.store.list_pods():
        if row.node == node and row.alive:
            runtime.kill_now(row)
            fresh = runtime.store.get_pod(row.name) or row
            runtime.store.update_pod(
                replace(fresh, state=PodState.LOST, reason="NodeLost", finished_at=runtime.clock())
            )
            _event(runtime, row, "NodeNotReady", f"chaos: node {node} went down with {row.name}")
            lost.append(row.name)
    for memory in runtime.home.snapshots_root.glob(f"*/{node}"):  # its memory is gone with it
        shutil.rmtree(memory, ignore_errors=True)
    return f"node {node}: NotReady" + (f"; lost pods {', '.join(lost)}" if lost else "")


def node_up(runtime: Runtime, node: str) -> str:
    record = _node(runtime, node)
    if not record.ready:
        runtime.store.update_node(replace(record, ready=True))
    return f"node {node}: Ready"


def _node(runtime: Runtime, name: str) -> NodeRecord:
    for node in runtime.store.list_nodes():
        if node.name == name:
            return node
    names = ", ".join(node.name for node in runtime.store.list_nodes()) or "none"
    raise ChaosError(f"no node {name!r}; nodes: {names}")


def _event(runtime: Runtime, row: PodRecord, reason: str, message: str) -> None:
    runtime.store.append_event(EventRecord(row.job, runtime.clock(), "Warning", reason, row.name, message))
