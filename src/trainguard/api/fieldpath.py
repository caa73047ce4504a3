"""Field paths as users read them: ``spec.replicaSpecs.trainer.faultTolerantPolicy[0].exitCodes``."""

from __future__ import annotations

import json
import re

#: A path into a document: mapping keys and list positions.
FieldPath = tuple[str | int, ...]

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def format_path(path: FieldPath) -> str:
    """Dots between keys, ``[i]`` for list positions, ``["a/b"]`` for keys that are not plain words."""
    text = ""
    for segment in path:
        if isinstance(segment, int):
            text += f"[{segment}]"
        elif _PLAIN_KEY.match(segment):
            text += f".{segment}" if text else segment
        else:
            text += f"[{json.dumps(segment)}]"
    return text
