"""Reads the heartbeat files the SDK writes: ``<dir>/rank-<rank>.json``, each replaced atomically.

A file is parsed again only when its inode, size or modification time changed, so polling costs a directory scan.
Ranks whose writer process has ended are left out: after torchrun restarts its workers with new ranks, or a
rank finished, an old file must not look like a stuck rank.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainguard.agent.detector import HeartbeatSample
from trainguard.pod.contract import HEARTBEAT_PREFIX, HEARTBEAT_SUFFIX


@dataclass(frozen=True)
class Heartbeat:
    rank: int
    sample: HeartbeatSample
    metrics: dict[str, Any] = field(default_factory=dict)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class HeartbeatReader:
    def __init__(self, directory: Path, alive: Callable[[int], bool] = pid_alive) -> None:
        self.directory = directory
        self._alive = alive
        self._cache: dict[str, tuple[tuple[int, int, int], Heartbeat | None]] = {}

    def clear(self) -> None:
        """Remove every heartbeat file: a new attempt starts with none."""
        for name in list(self._names()):
            with contextlib.suppress(OSError):
                (self.directory / name).unlink()
        self._cache.clear()

    def read(self) -> dict[int, Heartbeat]:
        """The latest heartbeat of each rank whose writer is alive."""
        beats: dict[int, Heartbeat] = {}
        seen: set[str] = set()
        for name in self._names():
            try:
                info = os.stat(self.directory / name)
            except OSError:
                continue
            seen.add(name)
            key = (info.st_ino, info.st_mtime_ns, info.st_size)
            cached = self._cache.get(name)
            if cached is None or cached[0] != key:
                cached = (key, self._parse(name))
                self._cache[name] = cached
            beat = cached[1]
            if beat is not None and self._alive(beat.sample.pid):
                beats[beat.rank] = beat
        for gone in set(self._cache) - seen:
            del self._cache[gone]
        return beats

    def _names(self) -> list[str]:
        try:
            return [
                name
                for name in os.listdir(self.directory)
                if name.startswith(HEARTBEAT_PREFIX) and name.endswith(HEARTBEAT_SUFFIX)
            ]
        except OSError:
            return []

    def _parse(self, name: str) -> Heartbeat | None:
        try:
            data = json.loads((self.directory / name).read_bytes())
            rank = int(data.get("rank", name[len(HEARTBEAT_PREFIX) : -len(HEARTBEAT_SUFFIX)]))
            step = data.get("step")
            metrics = data.get("metrics") or {}
            return Heartbeat(
                rank=rank,
                sample=HeartbeatSample(
                    step=None if step is None else int(step),
                    written_at=float(data["time"]),
                    pid=int(data["pid"]),
                ),
                metrics=metrics if isinstance(metrics, dict) else {},
            )
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None  # not ours, or being replaced right now: the next poll reads it again
