"""trainguard.sdk: what training code uses, also reachable as ``trainguard.<name>`` (e.g. ``trainguard.heartbeat``).

Imports nothing else of trainguard's and no torch at module level, so ``import trainguard`` stays cheap.
"""

from trainguard.sdk._roundstore import LiveError
from trainguard.sdk._snapplan import ReshardError
from trainguard.sdk.checkpoint import Checkpoint, Checkpointer, CheckpointError
from trainguard.sdk.elasticity import ElasticInfo, elastic
from trainguard.sdk.globalbatch import BatchPlan, GlobalBatch
from trainguard.sdk.heartbeat import heartbeat
from trainguard.sdk.live import Live
from trainguard.sdk.sampler import ElasticSampler
from trainguard.sdk.snapshots import Restored, Snapshots

__all__ = [
    "BatchPlan",
    "Checkpoint",
    "CheckpointError",
    "Checkpointer",
    "ElasticInfo",
    "ElasticSampler",
    "GlobalBatch",
    "Live",
    "LiveError",
    "ReshardError",
    "Restored",
    "Snapshots",
    "elastic",
    "heartbeat",
]
