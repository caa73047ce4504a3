"""trainguard.sdk: what training code uses, also reachable as ``trainguard.<name>`` (e.g. ``trainguard.heartbeat``).

Imports nothing else of trainguard's and no torch at module level, so ``import trainguard`` stays cheap.
"""

from trainguard.sdk.heartbeat import heartbeat

__all__ = ["heartbeat"]
