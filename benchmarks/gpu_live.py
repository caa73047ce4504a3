"""Live recovery on one GPU: the survivors' pause after a rank is killed or stopped, and a newcomer's time to
its first step, against restarting every rank (what torchrun does), in one run.

    PYTHONPATH=src python benchmarks/gpu_live.py [--device cuda|cpu] [--ranks 3] [--params 100e6]

Every rank is a process training a ``--params`` MLP with Adam under DDP over gloo with device tensors (NCCL
refuses two ranks on one GPU), in live mode (``trainguard.Live``) on a store this script serves, as a job's
rendezvous store would be. This script plays the agents: it starts the ranks, and marks a rank it killed
gone in the store, as a rank's agent does when its worker ends.

Scenes, in order:

1. ``kill``: all ranks train; one (not rank 0) is SIGKILLed. The survivors' pause: from the kill to each
   survivor's next completed step, beside their step time before. Their pids are checked unchanged.
2. ``join``: a replacement starts (a fresh python: torch's import, the device's start, the model built), then
   joins the survivors' next round and receives the state from one of them. Its time from its start to its
   first step, from ready (model built) to first step, and the survivors' longest pause while it joins.
   Its parts: the survivors' forming of the new round (of which the state's transfer), and the new round's
   first steps in theirs (forward, backward, optimizer) on the newcomer and on a survivor.
   Every rank's parameters are compared at one step after the join (they must be equal). Three joins, each
   newcomer killed before the next: cold, with ``Live(warmup=...)`` (a forward and a backward before it
   arrives), cold again.
3. ``stop``: one rank is SIGSTOPped in the middle of training (a silent member: frozen, or its node gone); its
   beats stop, and the others leave its round at once and go on without it: back within 3 s, far below the
   collectives' bound (``--timeout``). It is then continued, and rejoins (a later round has it as a member).
4. ``restart``: the baseline. Every rank killed and started again, as torchrun restarts all workers on any
   fault: from the kill to the new world's first step (its state not even loaded).
5. ``nccl`` (on a GPU): live mode on NCCL, one rank (NCCL refuses a second on the same GPU): a round's
   communicator aborted from the watchdog's side while a step is due, the next collective fails, the next
   round forms on a new communicator and trains on. What it shows: the abort path works on a real NCCL
   communicator; not a peer's hang, which needs two GPUs.

The last line is one JSON object with every figure; ``--keep`` writes it under benchmarks/results too.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent / "src"))
from trainguard.pod.contract import ENV_LIVE_MARK, ENV_LIVE_SPARE_FD, SPARE_READY_SUFFIX  # noqa: E402

# -- a rank -------------------------------------------------------------------------------------------------


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), **fields}), flush=True)


def rank_main(args: argparse.Namespace) -> None:
    started = time.time()
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from trainguard.sdk.live import Live

    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.init()
    width, layers = shape(args.params)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        *[m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-5)

    def warm_up() -> None:  # a forward and a backward of one batch, no collective: its first kernels
        if args.warmup_ddp:
            # The same through DDP (Live runs a warm-up in a group of this process alone): DDP's buckets, and
            # on a GPU gloo's pinned host buffers of their sizes, made before the process arrives, not in the
            # new round's first step while the survivors wait.
            wrapped = DDP(model, init_sync=False)
            for _ in range(2):  # the second: DDP's buckets rebuilt in the order the first backward used
                wrapped(torch.randn(args.batch, width, device=device)).pow(2).mean().backward()
            del wrapped
        else:
            model(torch.randn(args.batch, width, device=device)).pow(2).mean().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()

    live = Live(
        {"model": model, "optimizer": optimizer},
        timeout=args.timeout,
        warmup=warm_up if args.warmup else None,
    )
    emit("ready", member=live.member, since_start=time.time() - started)

    def train(live: Live) -> None:
        formed = live.formations[-1]
        emit("formed", warmup_seconds=live.warmup_seconds, **formed.as_dict())
        ddp = DDP(model, init_sync=False)
        emit("wrapped")
        generator = torch.Generator(device=device)

        def mark() -> float:
            if device.type == "cuda":
                torch.cuda.synchronize()
            return time.time()

        for step in live.steps(args.total):
            timed = step - formed.step < 3  # a round's first steps, in their parts
            t0 = mark() if timed else 0.0
            generator.manual_seed(step * 1000 + live.rank)
            batch = torch.randn(args.batch, width, device=device, generator=generator)
            loss = ddp(batch).pow(2).mean()
            optimizer.zero_grad(set_to_none=True)
            t1 = mark() if timed else 0.0
            loss.backward()
            t2 = mark() if timed else 0.0
            optimizer.step()
            t3 = mark()
            if timed:
                emit(
                    "parts", round=live.round, step=step, forward=t1 - t0, backward=t2 - t1, optimizer=t3 - t2
                )
            done = step + 1
            total = None
            if done % args.check_every == 0:
                total = float(sum(p.detach().double().sum().item() for p in model.parameters()))
            emit("step", step=done, rank=live.rank, world=live.world_size, sum=total,
                 agreed=live.agreements, agreed_s=live.agreement_seconds)  # fmt: skip
            if args.step_delay:
                time.sleep(args.step_delay)

    live.run(train)


def nccl_main(args: argparse.Namespace) -> None:
    """One rank in live mode on NCCL: round 1 aborted by the watchdog's path, round 2 trains on."""
    import torch
    import torch.distributed as dist
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    from trainguard.sdk.live import Live

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    model = torch.nn.Linear(64, 64).to(args.device)
    live = Live({"model": model}, store=f"127.0.0.1:{port}", size=1, backend="nccl", timeout=args.timeout)
    seen: dict[str, Any] = {"errors": []}

    def train(live: Live) -> None:
        for step in live.steps(6):
            value = torch.ones(4, device=args.device)
            if live.round == 1 and step == 2:
                aborter = threading.Thread(target=live._abort, args=("gpu_live: the watchdog's abort",))
                aborter.start()
                aborter.join()
                seen["aborted_at"] = time.time()
            dist.all_reduce(value)
            torch.cuda.synchronize()
            seen[f"round{live.round}_step{step}"] = float(value[0])

    try:
        live.run(train)
    except Exception as error:  # reported, not raised: the scene says what failed
        seen["error"] = f"{type(error).__name__}: {error}"
    seen["rounds"] = [f.as_dict() for f in live.formations]
    emit("nccl", **seen)
    del server


def shape(params: float) -> tuple[int, int]:
    """An MLP of about ``params`` parameters: a width, and 6 layers (at least 64 wide)."""
    layers = 6
    width = max(64, int((params / layers) ** 0.5))
    return width, layers


# -- this script, as the agents ------------------------------------------------------------------------------


@dataclass
class Rank:
    process: subprocess.Popen[str]
    spawned: float
    events: list[dict[str, Any]] = field(default_factory=list)
    member: str = ""
    #: A hot spare's end of its pipe (this script plays its launcher): a line on it calls the spare in.
    call_fd: int | None = None
    marks: Path | None = None

    def spare_ready(self) -> bool:
        """The spare waits on its pipe, warm (it marks itself ready as the live launcher counts it)."""
        assert self.marks is not None
        return (self.marks / f"{self.process.pid}{SPARE_READY_SUFFIX}").exists()

    def call(self) -> float:
        assert self.call_fd is not None
        called = time.time()
        os.write(self.call_fd, b"0\n")
        os.close(self.call_fd)
        self.call_fd = None
        return called

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                event = json.loads(line)
                if event.get("event") == "ready":
                    self.member = event["member"]
                self.events.append(event)
                continue
            sys.stderr.write(f"[{self.process.pid}] {line}")

    def steps_after(self, t: float) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["event"] == "step" and e["t"] > t]

    def last_step(self) -> int:
        steps = [e["step"] for e in list(self.events) if e["event"] == "step"]
        return steps[-1] if steps else 0

    def pids(self) -> set[int]:
        """The pids its steps were taken in, as each step's line says: one, where nothing restarted it."""
        return {e["pid"] for e in list(self.events) if e["event"] == "step"}

    def formed_after(self, t: float) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["event"] == "formed" and e["t"] > t]


class Agents:
    def __init__(self, args: argparse.Namespace, store: Any, address: str) -> None:
        self.args = args
        self.store = store
        self.address = address
        self.ranks: list[Rank] = []

    def start(
        self, prefix: str, size: int, warmup: bool = False, warmup_ddp: bool = False, spare: bool = False
    ) -> Rank:
        env = dict(
            os.environ,
            TRAINGUARD_LIVE_STORE=self.address,
            TRAINGUARD_LIVE_PREFIX=prefix,
            WORLD_SIZE=str(size),
            PYTHONPATH=os.pathsep.join([str(HERE.parent.parent / "src"), os.environ.get("PYTHONPATH", "")]),
        )
        command = [
            sys.executable,
            str(HERE),
            "--worker",
            *self._worker_args(),
            *(["--warmup"] if warmup or warmup_ddp else []),
            *(["--warmup-ddp"] if warmup_ddp else []),
        ]
        read_end, call_fd, marks = -1, None, None
        if spare:  # as the pod's live launcher starts a hot spare: a pipe to call it, a folder for its mark
            read_end, call_fd = os.pipe()
            marks = Path(tempfile.mkdtemp(prefix="gpu-live-marks-"))
            env[ENV_LIVE_SPARE_FD] = str(read_end)
            env[ENV_LIVE_MARK] = str(marks)
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, text=True, env=env, pass_fds=(read_end,) if spare else ()
        )
        if spare:
            os.close(read_end)
        rank = Rank(process, time.time(), call_fd=call_fd, marks=marks)
        threading.Thread(target=rank.read, daemon=True).start()
        self.ranks.append(rank)
        return rank

    def _worker_args(self) -> list[str]:
        a = self.args
        return [
            f"--device={a.device}",
            f"--params={a.params}",
            f"--batch={a.batch}",
            f"--timeout={a.timeout}",
            f"--total={a.total}",
            f"--check-every={a.check_every}",
            f"--step-delay={a.step_delay}",
        ]

    def gone(self, prefix: str, rank: Rank) -> None:
        """What a rank's agent does when its worker ends: marks it gone, so no round waits for it."""
        self.store.set(f"{prefix}gone/{rank.member}", "1")

    def stop_all(self) -> None:
        for rank in self.ranks:
            with contextlib.suppress(ProcessLookupError):
                rank.process.send_signal(signal.SIGCONT)
                rank.process.kill()
        for rank in self.ranks:
            rank.process.wait()
        self.ranks = []


def wait_for(what: str, check: Any, seconds: float) -> Any:
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError(f"gpu_live: {what} not within {seconds:.0f} s")


def step_time(ranks: list[Rank], after: float) -> float:
    gaps = []
    for rank in ranks:
        times = [e["t"] for e in rank.steps_after(after)]
        gaps += [b - a for a, b in itertools.pairwise(times)]
    return statistics.median(gaps) if gaps else float("nan")


def longest_gap(rank: Rank, start: float, end: float) -> float:
    times = [start] + [e["t"] for e in rank.steps_after(start) if e["t"] <= end] + [end]
    return max(b - a for a, b in itertools.pairwise(times))


def join_phases(rank: Rank, start: float, end: float) -> dict[str, float] | None:
    """A survivor's pause at a join, in its parts: from its last step of the old round to the new round
    formed (of which the state's transfer), the model wrapped in DDP again, and its first step in the new
    round."""
    formed = next((e for e in rank.events if e["event"] == "formed" and start < e["t"] <= end), None)
    if formed is None:
        return None
    before = [e["t"] for e in rank.events if e["event"] == "step" and e["t"] < formed["t"]]
    after = [e["t"] for e in rank.events if e["event"] == "step" and e["t"] > formed["t"]]
    wrapped = next((e["t"] for e in rank.events if e["event"] == "wrapped" and e["t"] >= formed["t"]), None)
    if not before or not after or wrapped is None:
        return None
    return {
        "forming_s": round(formed["t"] - before[-1], 3),
        "of_which_transfer_s": formed["transfer_seconds"],
        "ddp_wrap_s": round(wrapped - formed["t"], 3),
        "first_step_s": round(after[0] - wrapped, 3),
    }


def sums_at(ranks: list[Rank], step: int) -> list[float | None]:
    found = []
    for rank in ranks:
        found.append(
            next((e["sum"] for e in rank.events if e["event"] == "step" and e["step"] == step), None)
        )
    return found


def scene_live(args: argparse.Namespace, agents: Agents, budget: float) -> dict[str, Any]:
    prefix = "gpu-live/live/"
    ranks = [agents.start(prefix, args.ranks) for _ in range(args.ranks)]
    pids = [r.process.pid for r in ranks]
    warm = wait_for(
        "every rank's first steps", lambda: all(r.last_step() >= args.warm for r in ranks), budget
    )
    t0 = time.time()
    wait_for("steps at full size", lambda: all(len(r.steps_after(t0)) >= 3 for r in ranks), budget)
    before = step_time(ranks, t0)
    first_start = [next(e["t"] for e in r.events if e["event"] == "step") - r.spawned for r in ranks]
    # 1. kill
    victim = ranks[-1]
    survivors = ranks[:-1]
    killed_at = time.time()
    victim.process.kill()
    agents.gone(prefix, victim)
    wait_for("the survivors' next step", lambda: all(r.steps_after(killed_at) for r in survivors), budget)
    pauses = [r.steps_after(killed_at)[0]["t"] - killed_at for r in survivors]
    formed_after_kill = [
        next(e for e in r.events if e["event"] == "formed" and e["t"] > killed_at) for r in survivors
    ]
    # 2. join: a cold newcomer, then (each killed in turn) one that warms up before it arrives, then a cold one
    # again, so that neither kind has the other's place in the run
    wait_for(
        "steps at the smaller size",
        lambda: all(len(r.steps_after(killed_at)) >= 3 for r in survivors),
        budget,
    )
    joins = []
    newcomer: Rank | None = None

    def leaves(rank: Rank) -> None:
        left_at = time.time()
        rank.process.kill()
        agents.gone(prefix, rank)
        wait_for(
            "the survivors on their own", lambda t=left_at: all(r.steps_after(t) for r in survivors), budget
        )

    for warmup, warmup_ddp in ((False, False), (True, False), (False, False), (True, True)):
        if newcomer is not None:
            leaves(newcomer)
        newcomer = agents.start(prefix, args.ranks, warmup=warmup, warmup_ddp=warmup_ddp)
        joins.append(join_measures(args, survivors, newcomer, warmup, budget, warmup_ddp=warmup_ddp))
    assert newcomer is not None
    # 2b. hot spares (as the pod's live launcher keeps them): started ahead, warm (the DDP warm-up), waiting on
    # their pipe in no round. A scale-out that calls one: the survivors' pause from the call to its first
    # step. Then a kill with a spare behind: the world whole again from the kill.
    leaves(newcomer)
    spare = agents.start(prefix, args.ranks, warmup_ddp=True, spare=True)
    wait_for("the spare ready (warm, waiting)", spare.spare_ready, budget + 60)
    settled = time.time()
    wait_for(
        "steps beside the spare", lambda: all(len(r.steps_after(settled)) >= 3 for r in survivors), budget
    )
    called_at = spare.call()
    scale_out = join_measures(args, survivors, spare, True, budget, warmup_ddp=True, since=called_at)
    behind = agents.start(prefix, args.ranks, warmup_ddp=True, spare=True)
    wait_for("the next spare ready", behind.spare_ready, budget + 60)
    settled = time.time()
    wait_for("steps beside the next spare", lambda: len(spare.steps_after(settled)) >= 3, budget)
    killed_spare_at = time.time()
    spare.process.kill()
    agents.gone(prefix, spare)
    behind.call()  # at once, as the launcher calls a spare when a worker of its pod ends
    whole = wait_for(
        "the whole world's first step after the kill",
        lambda: (
            all(
                any(e["world"] == args.ranks for e in r.steps_after(killed_spare_at))
                for r in [*survivors, behind]
            )
            and [*survivors, behind]
        ),
        budget,
    )
    spare_kill = {
        "whole_s": round(
            max(
                next(e["t"] for e in r.steps_after(killed_spare_at) if e["world"] == args.ranks)
                for r in whole
            )
            - killed_spare_at,
            3,
        ),
        "survivor_next_step_s": [
            round(r.steps_after(killed_spare_at)[0]["t"] - killed_spare_at, 3) for r in survivors
        ],
        "spare_first_step_after_kill_s": round(
            behind.steps_after(killed_spare_at)[0]["t"] - killed_spare_at, 3
        ),
    }
    newcomer = behind
    everyone = [*survivors, newcomer]
    # 3. stop (a hang): the newest rank stopped in the middle of its training
    stopped = everyone[1]
    others = [r for r in everyone if r is not stopped]
    stopped_at = time.time()
    stopped.process.send_signal(signal.SIGSTOP)
    wait_for(
        "the others' next step",
        lambda: all(r.steps_after(stopped_at + 0.01) for r in others),
        args.timeout + 60,
    )
    hang_pauses = [r.steps_after(stopped_at)[0]["t"] - stopped_at for r in others]
    stopped.process.send_signal(signal.SIGCONT)
    continued = time.time()
    wait_for("the stopped rank back", lambda: stopped.steps_after(continued), budget)
    rejoined = wait_for(
        "a round with the stopped rank a member again",
        lambda: next((f for f in stopped.formed_after(continued) if f["world_size"] == len(everyone)), None),
        budget,
    )
    alive = all(r.process.poll() is None for r in everyone)
    result = {
        "ranks": args.ranks,
        "first_step_after_start_s": [round(x, 2) for x in first_start],
        "step_s": round(before, 4),
        "kill": {
            "survivor_pause_s": [round(p, 3) for p in pauses],
            # Each survivor's steps, before and after the kill, in one process: the one it started as.
            "survivor_pids_unchanged": all(r.pids() == {pid} for r, pid in zip(survivors, pids, strict=False))
            and all(r.process.poll() is None for r in survivors),
            "origins": [f["origin"] for f in formed_after_kill],
            "steps_lost": [
                formed_after_kill[i]["step"]
                - max(
                    (e["step"] for e in r.events if e["event"] == "step" and e["t"] <= killed_at), default=0
                )
                for i, r in enumerate(survivors)
            ],
        },
        "join": joins[0],
        "joins": joins,
        "join_pause_s": {
            "cold": [max(j["survivor_longest_pause_s"]) for j in joins if not j["warmup"]],
            "warmed_up": [
                max(j["survivor_longest_pause_s"]) for j in joins if j["warmup"] and not j["warmup_ddp"]
            ],
            "warmed_up_ddp": [max(j["survivor_longest_pause_s"]) for j in joins if j["warmup_ddp"]],
        },
        # A hot spare called in as a scale-out (its pause from the call), and a kill with a spare behind it.
        "spare_scale_out": scale_out,
        "spare_scale_out_pause_s": max(scale_out["survivor_longest_pause_s"]),
        "spare_kill": spare_kill,
        "stop": {
            "timeout_s": args.timeout,
            "others_pause_s": [round(p, 3) for p in hang_pauses],
            "within_timeout_plus_2s": all(p <= args.timeout + 2 for p in hang_pauses),
            "within_3s": all(p <= 3.0 for p in hang_pauses),
            "stopped_rank_rejoined": rejoined["rank"] is not None and stopped.process.poll() is None,
            "stopped_rank_round": rejoined["round"],
        },
        # Every member agrees before a step is applied (trainguard.sdk._nccl.agree): its cost per step.
        "agreement": agreement(survivors, before),
        "all_alive": alive,
        "survivor_pids_unchanged": all(r.pids() == {pid} for r, pid in zip(survivors, pids, strict=False)),
        "warm_steps": warm,
    }
    agents.stop_all()
    return result


def agreement(ranks: list[Rank], step_s: float) -> dict[str, float]:
    """The agreement before each step, per step (each rank's own count and seconds, from its last step line),
    and its share of a step (``step_s``, measured before the faults)."""
    per_step = []
    for rank in ranks:
        last = rank.steps_after(0)[-1]
        if last.get("agreed"):
            per_step.append(last["agreed_s"] / last["agreed"])
    mean = statistics.mean(per_step) if per_step else 0.0
    return {"per_step_s": round(mean, 6), "share_of_step": round(mean / step_s, 5) if step_s else 0.0}


def join_measures(
    args: argparse.Namespace,
    survivors: list[Rank],
    newcomer: Rank,
    warmup: bool,
    budget: float,
    warmup_ddp: bool = False,
    since: float | None = None,
) -> dict[str, Any]:
    """A newcomer's join: its times, the survivors' longest pause from its ready (model built; a spare: from
    its call, ``since``) to its first step, and every rank's parameters compared at a step after it (they
    must be equal)."""
    spawned = newcomer.spawned
    wait_for("the newcomer's first step", lambda: newcomer.steps_after(spawned), budget + 60)
    ready = next(e for e in newcomer.events if e["event"] == "ready")
    first = newcomer.steps_after(spawned)[0]
    formed = next(e for e in newcomer.events if e["event"] == "formed")
    start = ready["t"] if since is None else since
    pause = [longest_gap(r, start, first["t"]) for r in survivors]
    everyone = [*survivors, newcomer]
    check_step = ((first["step"] // args.check_every) + 2) * args.check_every
    wait_for(
        "a checked step on every rank",
        lambda: all(s is not None for s in sums_at(everyone, check_step)),
        budget,
    )
    sums = sums_at(everyone, check_step)
    phases = [join_phases(r, start, first["t"]) for r in survivors]  # their next steps read by now
    # The first steps of the join's round, in their parts (or of the round right after it, where a loaded
    # machine re-formed again at once: each round's first steps are timed).
    parts = {
        who: [
            {
                k: round(e[k], 3) if isinstance(e[k], float) else e[k]
                for k in ("step", "forward", "backward", "optimizer")
            }
            for e in rank.events
            if e["event"] == "parts" and e["round"] >= formed["round"]
        ][:3]
        for who, rank in (("newcomer", newcomer), ("survivor", survivors[0]))
    }
    after = time.time()
    wait_for(
        "steps at full size again", lambda: all(len(r.steps_after(after)) >= 3 for r in everyone), budget
    )
    return {
        "warmup": warmup,
        "warmup_ddp": warmup_ddp,
        "called_to_first_step_s": None if since is None else round(first["t"] - since, 3),
        "warmup_s": formed["warmup_seconds"],
        "newcomer_start_to_first_step_s": round(first["t"] - spawned, 2),
        "newcomer_ready_to_first_step_s": round(first["t"] - ready["t"], 3),
        "newcomer_ready_after_start_s": round(ready["t"] - spawned, 2),
        "survivor_longest_pause_s": [round(p, 3) for p in pause],
        "survivor_phases": phases,
        "newcomer_first_step_after_formed_s": round(first["t"] - formed["t"], 3),
        "first_steps_in_parts_s": parts,
        "origin": formed["origin"],
        "transfer_s": formed["transfer_seconds"],
        "bytes": formed["bytes"],
        "step": formed["step"],
        "equal_parameters_at_step": check_step,
        "equal_parameters": len(set(sums)) == 1,
    }


def scene_restart(args: argparse.Namespace, agents: Agents, budget: float) -> dict[str, Any]:
    """The baseline: every rank started again after a fault, as torchrun does."""
    prefix = "gpu-live/restart-1/"
    ranks = [agents.start(prefix, args.ranks) for _ in range(args.ranks)]
    wait_for("every rank's first steps", lambda: all(r.last_step() >= 3 for r in ranks), budget)
    killed_at = time.time()
    agents.stop_all()
    fresh = [agents.start("gpu-live/restart-2/", args.ranks) for _ in range(args.ranks)]
    wait_for("the new world's first step", lambda: all(r.steps_after(killed_at) for r in fresh), budget + 60)
    back = max(r.steps_after(killed_at)[0]["t"] for r in fresh) - killed_at
    agents.stop_all()
    return {"restart_all_to_first_step_s": round(back, 2)}


def scene_nccl(args: argparse.Namespace) -> dict[str, Any]:
    """Live mode on NCCL, one rank: its communicator aborted, the next round formed on a new one."""
    command = [sys.executable, str(HERE), "--nccl-worker", "--device", args.device, "--timeout", "30"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.budget)
    except subprocess.TimeoutExpired as hung:
        return {"ok": False, "hung_s": args.budget, "stderr": str(hung.stderr or "")[-2000:]}
    found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"event": "nccl"')]
    if not found:
        return {"ok": False, "exit_code": done.returncode, "stderr": done.stderr[-2000:]}
    seen = found[0]
    rounds = seen.get("rounds", [])
    return {
        "ok": done.returncode == 0 and len(rounds) == 2 and "round2_step5" in seen,
        "rounds": len(rounds),
        "cause": rounds[1]["cause"] if len(rounds) > 1 else None,
        "back_after_abort_s": round(rounds[1]["at"] - seen["aborted_at"], 3) if len(rounds) > 1 else None,
        "exit_code": done.returncode,
        "error": seen.get("error"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--params", type=float, default=100e6)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=5.0, help="the collectives' bound (a hang's), s")
    parser.add_argument("--total", type=int, default=100000)
    parser.add_argument("--warm", type=int, default=5, help="steps every rank does before the first fault")
    parser.add_argument("--check-every", type=int, default=5)
    parser.add_argument("--step-delay", type=float, default=0.0)
    parser.add_argument("--budget", type=float, default=120.0, help="the longest wait for one thing, s")
    parser.add_argument("--keep", action="store_true", help="write the JSON under benchmarks/results")
    parser.add_argument("--nccl-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warmup", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warmup-ddp", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        rank_main(args)
        return 0
    if args.nccl_worker:
        nccl_main(args)
        return 0
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    agents = Agents(args, store, f"127.0.0.1:{port}")
    began = time.time()
    try:
        live = scene_live(args, agents, args.budget)
        restart = scene_restart(args, agents, args.budget)
        nccl = scene_nccl(args) if args.device.startswith("cuda") else None
    except TimeoutError:
        # The newest rank first, each in a line: whether it still runs, and its last events in short.
        for rank in reversed(agents.ranks):
            code = rank.process.poll()
            state = "running" if code is None else f"exited {code}"
            last = ", ".join(
                f"{e['event']}@{e['t']:.2f}" + (f" step {e['step']}" if "step" in e else "")
                for e in rank.events[-3:]
            )
            sys.stderr.write(f"rank {rank.process.pid} ({state}): {last or 'no event'}\n")
        raise
    finally:
        agents.stop_all()
    pause = max(live["kill"]["survivor_pause_s"])
    sys.path.insert(0, str(HERE.parent))
    from _results import keep, machine

    results = {
        "benchmark": "gpu_live",
        "device": args.device,
        "params": args.params,
        "machine": machine(),
        "live": live,
        "baseline": restart,
        "kill_pause_over_restart": round(pause / restart["restart_all_to_first_step_s"], 4),
        "nccl": nccl,
        "seconds": round(time.time() - began, 1),
    }
    if args.keep:
        keep("gpu_live", results)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
