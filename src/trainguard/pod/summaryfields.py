"""The checks a pod's summary applies to each field it takes (``trainguard.pod.summary``): from its agent's
events and from what a pod sent over the wire, each value of its type and bounded, or left out.

Standard library only, Python 3.8: it runs in users' images from the agent's bundle.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any

#: At most this many ranks are kept of a pod's ``ranks``.
RANKS_KEPT = 64
_ROUND_INTEGERS = ("worldSize", "step", "rank")
#: A live round's ``cause`` is cut to this many characters (the annotation stays small).
CAUSE_LIMIT = 200


def ranks(value: object) -> list[dict[str, Any]]:
    """``ranks`` as a pod sent them: entries with a whole rank and steps and a number of seconds, at most
    ``RANKS_KEPT``."""
    out: list[dict[str, Any]] = []
    for item in value if isinstance(value, list) else ():
        if not isinstance(item, dict):
            continue
        rank, steps, busy = (
            integer(item.get("rank")),
            integer(item.get("steps")),
            number(item.get("busySeconds")),
        )
        if rank is not None and steps is not None and busy is not None and busy >= 0:
            step = number(item.get("stepSeconds"))
            out.append({"rank": rank, "steps": steps, "busySeconds": busy, "stepSeconds": step or 0.0})
    return out[:RANKS_KEPT]


def round_entry(item: dict[str, Any]) -> dict[str, Any] | None:
    """A live round as a summary keeps it, each field of its type (those that are not are left out); None
    without a time or a round."""
    at, round_number = number(item.get("at")), integer(item.get("round"))
    if at is None or round_number is None:
        return None
    entry: dict[str, Any] = {"at": at, "round": round_number}
    for key in _ROUND_INTEGERS:
        if integer(item.get(key)) is not None:
            entry[key] = item[key]
    if isinstance(item.get("origin"), str):
        entry["origin"] = item["origin"][:16]
    seconds = number(item.get("seconds"))
    if seconds is not None:
        entry["seconds"] = seconds
    if isinstance(item.get("cause"), str):
        entry["cause"] = item["cause"][:CAUSE_LIMIT]
    return entry


def worker_restart(record: dict[str, Any]) -> dict[str, Any] | None:
    """A ``workers-restarted`` event as a summary's entry; None without a failure that has an exit code, or
    without a time."""
    failures = [item for item in record.get("failures") or [] if isinstance(item, dict)]
    coded = [item for item in failures if integer(item.get("exit_code")) is not None]
    at = number(record.get("failed_at")) or number(record.get("time"))
    if not coded or at is None:
        return None
    return {
        "at": at,
        "exitCode": coded[0]["exit_code"],
        "rank": integer(coded[0].get("rank")),
        "failed": len(failures),
        "restartsLeft": integer(record.get("restarts_left")),
        "maxRestarts": integer(record.get("max_restarts")),
        **({"spare": True} if record.get("spare") is True else {}),
    }


def number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def count(value: object) -> int:
    number = integer(value)
    return number if number is not None and number >= 0 else 0


def signal_number(value: object) -> int | None:
    """The agent names signals ("SIGKILL"); older lines may carry the number."""
    if isinstance(value, str):
        with contextlib.suppress(KeyError):
            return int(signal.Signals[value])
        return None
    return integer(value)
