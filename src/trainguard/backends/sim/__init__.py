"""trainguard.backends.sim: the real controller and policy engine, at a scale no test machine has.

A discrete-event cluster on a virtual clock (``clock``, ``cluster``) speaks the same backend interface as
the local runtime and the Kubernetes operator; ``engine`` drives ``controller.step`` against it while faults
(``failures``: drawn from rates per kind, or replayed from a trace) hit nodes and pods, and keeps the ledger
of where the time went (``accounting``). ``run.simulate`` is one run; ``compare`` sets policies side by side;
``report`` and ``plots`` show the figures; ``theory`` is Young/Daly's first-order model to check them
against. docs/simulator.md explains the model.
"""

from trainguard.backends.sim.clock import VirtualClock
from trainguard.backends.sim.cluster import SimCluster
from trainguard.backends.sim.engine import Engine
from trainguard.backends.sim.failures import Failure, FailureKind, TraceError, read_trace
from trainguard.backends.sim.run import RunResult, SimConfig, simulate
from trainguard.backends.sim.timing import Timing

__all__ = [
    "Engine",
    "Failure",
    "FailureKind",
    "RunResult",
    "SimCluster",
    "SimConfig",
    "Timing",
    "TraceError",
    "VirtualClock",
    "read_trace",
    "simulate",
]
