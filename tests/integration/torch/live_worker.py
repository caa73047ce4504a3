"""A live-mode worker for the tests: a small MLP under DDP over gloo, one JSON line per event on stdout.

With ``LIVE_WARMUP`` set, it passes ``Live`` a warm-up: ``forward`` (two forwards and backwards through DDP), ``step``
(... and an optimizer's step, which Live refuses) or ``fail`` (it raises).
With ``LIVE_FAULT_DIR`` set, a rank that finds ``$LIVE_FAULT_DIR/rank-<its rank>`` between its step's
all-reduce (the backward) and its optimizer's step takes the file and raises there, as a collective that
failed late would. Each step's line carries a hash of the parameters (``hash``).
With ``LIVE_HOLD_DIR`` set, the first process to start sending a state while ``$LIVE_HOLD_DIR/arm`` exists
writes its pid to ``$LIVE_HOLD_DIR/sending`` and stops there (the test then kills it in the middle of the
transfer); every later send goes through.
With ``LIVE_DIE_DIR`` set, the first process to make a round's group while ``$LIVE_DIE_DIR/die`` exists takes the
file and ends at once, before it makes the group: a member lost after its round closed.
With ``LIVE_TIMEOUT`` set, the collectives' bound (10 s by default).
With ``LIVE_FAIL_ONCE`` set, a process that finds that file removes it and fails before it makes its ``Live``
(a start that dies before its first round: out of memory, a bad node); the next start goes on.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import trainguard
from trainguard.sdk import _transfer


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), **fields}), flush=True)


def hold_sends(directory: Path) -> None:
    send = _transfer.send

    def held(group: object, tensors: list, *share: int) -> int:
        # The first sender (it sends bucket 0, which every transfer has) stops in the middle.
        if (directory / "arm").exists() and (len(share) < 2 or share[1] == 0):
            try:
                fd = os.open(directory / "sending", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                time.sleep(600)  # killed here
        return send(group, tensors, *share)

    _transfer.send = held


def die_before_groups(directory: Path) -> None:
    from trainguard.sdk._roundgroup import RoundGroup

    make = RoundGroup.make

    def dying(self: RoundGroup, *args: object, **kwargs: object) -> None:
        try:
            (directory / "die").rename(directory / f"died-{os.getpid()}")
        except FileNotFoundError:
            return make(self, *args, **kwargs)  # type: ignore[arg-type]
        emit("dying")
        os._exit(9)

    RoundGroup.make = dying  # type: ignore[method-assign]


def main() -> None:
    fail_once = Path(os.environ.get("LIVE_FAIL_ONCE") or "/nonexistent")
    if fail_once.is_file():
        fail_once.unlink()
        emit("failing")
        raise SystemExit(
            "RuntimeError: CUDA error: out of memory (a start that fails before its first round)"
        )
    if os.environ.get("LIVE_DIE_DIR"):
        die_before_groups(Path(os.environ["LIVE_DIE_DIR"]))
    if os.environ.get("LIVE_HOLD_DIR"):
        hold_sends(Path(os.environ["LIVE_HOLD_DIR"]))
    torch.manual_seed(
        int(os.environ.get("LIVE_SEED", "0"))
    )  # different per process: the state must come over
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    faults = Path(os.environ["LIVE_FAULT_DIR"]) if os.environ.get("LIVE_FAULT_DIR") else None
    warmup = os.environ.get("LIVE_WARMUP")  # forward (as it should be), step (steps the optimizer), fail

    def warm_up() -> None:
        emit("warmup", mode=warmup)
        wrapped = DDP(model, init_sync=False)  # as train wraps it: in a group of this process alone
        for _ in range(2):  # the second: DDP's buckets as rebuilt after a first backward
            wrapped(torch.randn(16, 64)).pow(2).mean().backward()
        if warmup == "step":
            optimizer.step()
        if warmup == "fail":
            raise ValueError("a warm-up that fails")

    live = trainguard.Live(
        {"model": model, "optimizer": optimizer},
        timeout=float(os.environ.get("LIVE_TIMEOUT", "10")),
        warmup=warm_up if warmup else None,
    )
    emit("ready", member=live.member, host=socket.gethostname())
    atexit.register(lambda: emit("agreed", count=live.agreements, seconds=live.agreement_seconds))

    def train(live: trainguard.Live) -> None:
        emit("formed", warmup_seconds=live.warmup_seconds, **live.formations[-1].as_dict())
        ddp = DDP(model, init_sync=False)
        for step in live.steps(100000):
            generator = torch.Generator().manual_seed(step * 100 + live.rank)
            loss = ddp(torch.randn(16, 64, generator=generator)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            if faults is not None:
                claim = faults / f"rank-{live.rank}"
                try:
                    claim.rename(faults / f"taken-{os.getpid()}-{step}")
                except FileNotFoundError:
                    pass
                else:
                    emit("fault", step=step, rank=live.rank)
                    raise RuntimeError("injected: a collective failed between the all-reduce and the step")
            optimizer.step()
            total = float(sum(p.detach().double().sum() for p in model.parameters()))
            digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
            emit(
                "step",
                step=step + 1,
                rank=live.rank,
                world=live.world_size,
                sum=total,
                hash=digest.hexdigest(),
            )
            time.sleep(0.02)

    live.run(train)


if __name__ == "__main__":
    sys.exit(main())
