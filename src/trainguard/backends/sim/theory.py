"""What theory says about checkpointing under exponential failures (Young 1974, Daly 2006), first order.

With failures at rate 1/M (M: the job's MTBF, the per-node MTBF divided by its nodes), a checkpoint of cost
δ every τ seconds of compute and a restart of cost R, the share of time lost is about
δ/τ (checkpoints) + τ/(2M) (half an interval of rework per failure) + R/M (restarts); it is smallest at
Young's interval τ* = √(2δM), where the goodput is 1 - √(2δ/M) - R/M.
"""

from __future__ import annotations

import math


def young_daly_interval(cost: float, mtbf: float) -> float:
    return math.sqrt(2 * cost * mtbf)


def expected_goodput(interval: float, cost: float, restart: float, mtbf: float) -> float:
    return 1 - cost / interval - interval / (2 * mtbf) - restart / mtbf


def goodput_at_optimum(cost: float, restart: float, mtbf: float) -> float:
    return 1 - math.sqrt(2 * cost / mtbf) - restart / mtbf


def job_mtbf(node_mtbf: float, nodes: int) -> float:
    """The MTBF of a job on ``nodes`` nodes that each fail independently with MTBF ``node_mtbf``."""
    return node_mtbf / nodes
