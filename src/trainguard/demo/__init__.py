"""The README's first command (``./scripts/demo``, ``python -m trainguard.demo``): example 1 trained on this
machine through a kill and two resizes, next to the same run without faults.

``trainguard.demo.session`` drives example jobs on a private local runtime; the PyTorch integration tests
and ``benchmarks/recovery.py`` use it too.
"""

from trainguard.demo.tour import main

__all__ = ["main"]
