"""``elastic()``: where this worker stands in an elastic job, and whether the world changed.

Call it once per step (it reads a few environment variables, or torch.distributed when that is initialized)
and react when ``world_changed`` is true: rescale the learning rate, rebuild the sampler's split, log it.

The world is ``(world_size, group_world_size)``: the number of workers and the number of nodes (torchrun's
agents). It is remembered in the process and, under torchrun, across its restarts of the worker within one run:
in ``$TRAINGUARD_STATE_DIR`` (default: the temporary directory) as
``trainguard-elastic-<TORCHELASTIC_RUN_ID>-<LOCAL_RANK>.json``. A record counts only when it comes from an
earlier restart of the same run (a lower ``TORCHELASTIC_RESTART_COUNT``), so a new run never compares itself with
an old one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from trainguard.pod import contract
from trainguard.sdk._world import current_world, env_int


@dataclass(frozen=True)
class ElasticInfo:
    rank: int
    local_rank: int
    world_size: int
    #: Nodes (torchrun agents) in the job; 1 without torchrun.
    group_world_size: int
    #: TORCHELASTIC_RESTART_COUNT: how many times torchrun restarted the workers of this run.
    restart_count: int
    #: The world differs from the one of the previous call (or of the previous restart, on the first call).
    world_changed: bool
    previous_world_size: int | None


@dataclass(frozen=True)
class _Seen:
    world_size: int
    group_world_size: int
    restart_count: int


_lock = threading.Lock()
_last: _Seen | None = None


def elastic() -> ElasticInfo:
    """Rank, local rank, world size, restart count, and whether the world changed since the last call."""
    global _last
    world = current_world()
    now = _Seen(
        world_size=world.world_size,
        group_world_size=env_int(contract.GROUP_WORLD_SIZE, 1),
        restart_count=env_int(contract.TORCHELASTIC_RESTART_COUNT, 0),
    )
    with _lock:
        previous = _last if _last is not None else _load_earlier_attempt(now.restart_count, world.local_rank)
        if previous != now:
            _last = now
            _persist(now, world.local_rank)
    changed = previous is not None and (previous.world_size, previous.group_world_size) != (
        now.world_size,
        now.group_world_size,
    )
    return ElasticInfo(
        rank=world.rank,
        local_rank=world.local_rank,
        world_size=world.world_size,
        group_world_size=now.group_world_size,
        restart_count=now.restart_count,
        world_changed=changed,
        previous_world_size=None if previous is None else previous.world_size,
    )


def _record_path(local_rank: int) -> Path | None:
    run_id = os.environ.get(contract.TORCHELASTIC_RUN_ID)
    if not run_id:
        return None
    directory = os.environ.get(contract.ENV_STATE_DIR) or tempfile.gettempdir()
    safe_id = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)
    return Path(directory) / f"trainguard-elastic-{safe_id}-{local_rank}.json"


def _load_earlier_attempt(restart_count: int, local_rank: int) -> _Seen | None:
    path = _record_path(local_rank)
    if path is None or restart_count == 0:
        return None
    try:
        seen = _Seen(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return seen if seen.restart_count < restart_count else None


def _persist(seen: _Seen, local_rank: int) -> None:
    path = _record_path(local_rank)
    if path is None:
        return
    # Best effort: losing this record only means one missed "world changed", never a failed training step.
    with contextlib.suppress(OSError):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(seen)))
        os.replace(tmp, path)
