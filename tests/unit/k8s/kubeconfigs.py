"""Kubeconfig documents for the tests of trainguard's own kubeconfig reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: An API server's address in the documentation range: nothing is ever sent to it.
SERVER = "https://203.0.113.7:6443"


def document(cluster: dict[str, Any], user: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": cluster}],
        "contexts": [
            {"name": "ctx", "context": {"cluster": "c", **({"user": "u"} if user is not None else {})}}
        ],
        "users": [{"name": "u", "user": user}] if user is not None else [],
    }


def write(path: Path, doc: dict[str, Any]) -> str:
    path.write_text(json.dumps(doc))  # JSON is YAML
    return str(path)
