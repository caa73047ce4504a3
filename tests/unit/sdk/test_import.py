"""``import trainguard`` stays cheap: the SDK loads on first use and never imports torch by itself."""

from __future__ import annotations

import subprocess
import sys


def test_importing_trainguard_and_touching_the_sdk_does_not_import_torch() -> None:
    probe = (
        "import sys, trainguard\n"
        "assert 'trainguard.sdk' not in sys.modules, 'the SDK loaded eagerly'\n"
        "names = [trainguard.Checkpointer, trainguard.ElasticSampler, trainguard.heartbeat, trainguard.elastic]\n"
        "info = trainguard.elastic()\n"
        "assert (info.rank, info.world_size) == (0, 1), info\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_sdk_names_are_public_attributes() -> None:
    import trainguard
    import trainguard.sdk

    for name in ("Checkpointer", "Checkpoint", "CheckpointError", "ElasticSampler", "ElasticInfo", "elastic"):
        assert name in trainguard.__all__
        assert getattr(trainguard, name) is getattr(trainguard.sdk, name)
