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


def renewal_goodput(interval: float, cost: float, restart: float, mtbf: float) -> float:
    """The exact expectation when failures (rate 1/M, at any time) destroy the work since the last complete
    checkpoint while training, and start a recovery of length R over again while recovering: training lasts
    M on average and saves τ per full cycle of τ + δ, so E[saved] = τ / (e^((τ+δ)/M) - 1); a recovery lasts
    M(e^(R/M) - 1) on average. The first-order formulas above are its expansion for small δ/M and R/M."""
    return interval / (mtbf * math.expm1((interval + cost) / mtbf) * math.exp(restart / mtbf))


def job_mtbf(node_mtbf: float, nodes: int) -> float:
    """The MTBF of a job on ``nodes`` nodes that each fail independently with MTBF ``node_mtbf``."""
    return node_mtbf / nodes
