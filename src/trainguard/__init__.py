from typing import TYPE_CHECKING

from trainguard._version import __version__

if TYPE_CHECKING:
    from trainguard.sdk import (
        Checkpoint,
        Checkpointer,
        CheckpointError,
        ElasticInfo,
        ElasticSampler,
        GlobalBatch,
        ReshardError,
        Restored,
        Snapshots,
        elastic,
        heartbeat,
    )
    from trainguard.sdk._roundstore import LiveError
    from trainguard.sdk.live import Live

__all__ = [
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
    "__version__",
    "elastic",
    "heartbeat",
]


def __getattr__(name: str) -> object:
    """The SDK (``trainguard.heartbeat``, ...) loads on first use, so the CLI and the agent do not pay for it."""
    import importlib

    sdk = importlib.import_module("trainguard.sdk")
    if name in sdk.__all__:
        return getattr(sdk, name)
    raise AttributeError(f"module 'trainguard' has no attribute {name!r}")
