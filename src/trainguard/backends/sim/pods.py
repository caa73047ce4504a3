"""The simulated cluster's records: a node with its one pod slot, and a pod as the cluster keeps it."""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.controller import AgentReport, ObservedPhase, ObservedPod

GPU_POOL = "gpu"
CPU_POOL = "cpu"


@dataclass
class SimNode:
    name: str
    pool: str = GPU_POOL
    #: What the control plane sees.
    ready: bool = True
    #: Whether the machine works (a lost node is dead before it is seen NotReady).
    alive: bool = True
    #: Unschedulable (drained for maintenance): Ready, but nothing new is placed on it.
    cordoned: bool = False
    #: Isolated after a fault tolerance check found its hardware faulty: nothing is placed on it again.
    isolated: bool = False
    pod: str | None = None


@dataclass
class SimPod:
    name: str
    role: str
    index: int
    generation: int
    pool: str
    avoid: tuple[str, ...] = ()
    phase: ObservedPhase = ObservedPhase.PENDING
    node: str | None = None
    started_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    agent: AgentReport | None = None
    terminating: bool = False

    def observed(self) -> ObservedPod:
        return ObservedPod(
            name=self.name,
            role=self.role,
            index=self.index,
            generation=self.generation,
            phase=self.phase,
            node=self.node,
            exit_code=self.exit_code,
            reason=self.reason,
            started_at=self.started_at,
            terminating=self.terminating,
            agent=self.agent,
        )
