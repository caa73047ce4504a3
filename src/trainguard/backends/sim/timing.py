"""The simulation's costs and delays: what each step of a fault and its recovery takes."""

from __future__ import annotations

from dataclasses import dataclass

#: What a process killed by the NCCL/c10d watchdog (SIGABRT) exits with.
ABORT_EXIT_CODE = 134


@dataclass(frozen=True)
class Timing:
    """Costs and delays, in seconds."""

    #: δ: writing one checkpoint.
    checkpoint_cost: float
    #: R: from every pod running again to training again (rendezvous, loading the checkpoint).
    restart_cost: float
    #: A lost node is seen NotReady after this long (Kubernetes' node-monitor-grace-period).
    node_detect: float = 40.0
    #: A process exit is seen after this long.
    crash_detect: float = 1.0
    #: Without hang detection, a stuck collective ends when the watchdog aborts it (PyTorch's NCCL default).
    collective_timeout: float = 600.0
    #: An evicted pod has this long to stop; the job saves on SIGTERM when its checkpoint fits in it.
    grace: float = 30.0
    #: A lost node comes back after this long.
    repair: float = 24 * 3600.0
    #: A node whose pod was evicted (drained for maintenance, or taken by a preemptor) is back after this.
    maintenance: float = 2 * 3600.0
    crash_exit_code: int = ABORT_EXIT_CODE
    #: Changes that need no decision are handed to the controller at most this often.
    batch: float = 1.0
