"""The job formats trainguard reads, each converted into the one native model.

Dialects are chosen by ``apiVersion`` and ``kind``; ModelArts-style annotations (``modelarts``) apply on
top of any of them.
"""

from __future__ import annotations

from trainguard.api.dialects import aitrainingjob, native, pytorchjob
from trainguard.api.dialects.base import Conversion, Dialect

DIALECTS: tuple[Dialect, ...] = (native.DIALECT, aitrainingjob.DIALECT, pytorchjob.DIALECT)


def find(api_version: object, kind: object) -> Dialect | None:
    for dialect in DIALECTS:
        if api_version in dialect.api_versions and kind == dialect.kind:
            return dialect
    return None


def supported() -> list[str]:
    """``apiVersion kind`` of every format, for messages."""
    return [entry for dialect in DIALECTS for entry in dialect.supported()]


__all__ = ["DIALECTS", "Conversion", "Dialect", "find", "supported"]
