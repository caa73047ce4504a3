"""Training stand-ins for the agent's integration tests: ``python workload.py MODE [options]``.

Each mode behaves like one kind of job (stuck, slow, silent, chatty, ...). ``--marker FILE`` collects
``<event> <wall time> <attempt>`` lines that the tests use to measure latencies from the real moment.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from trainguard.sdk.heartbeat import MIN_INTERVAL, heartbeat

ATTEMPT = int(os.environ.get("TRAINGUARD_ATTEMPT", "0"))


def mark(path: str | None, event: str) -> None:
    if path:
        with open(path, "a") as out:
            out.write(f"{event} {time.time()} {ATTEMPT}\n")


def forever() -> None:
    while True:
        time.sleep(3600)


def stuck(args: argparse.Namespace) -> None:
    """Heartbeat steps, then stop progressing (sleep forever); ``--advance`` gets further each attempt."""
    last = args.steps * (ATTEMPT if args.advance else 1)
    for step in range(last):
        heartbeat(step=step)
        print(f"step {step}")
        time.sleep(args.interval)
    # Heartbeats are written at most every MIN_INTERVAL: the step it sticks at is written whatever the steps
    # before it took, so that every attempt's highest step is the same (on a busy machine a slow step 1 was
    # written by one attempt and not by the next, which then seemed to progress past the last hang).
    time.sleep(MIN_INTERVAL)
    heartbeat(step=last)
    if args.exit_on_attempt == ATTEMPT:
        return
    mark(args.marker, "stuck")
    forever()


def chatty(args: argparse.Namespace) -> None:
    """Print a line every interval, forever; heartbeat the first ``--heartbeats`` steps only."""
    step = 0
    while True:
        if step < args.heartbeats:
            heartbeat(step=step)
        elif step == args.heartbeats:
            mark(args.marker, "heartbeats-stopped")
        print(f"working {step}")
        step += 1
        time.sleep(args.interval)


def slow(args: argparse.Namespace) -> None:
    """Progress every interval for a number of steps, by heartbeat or by a line of output, then succeed."""
    for step in range(args.steps):
        time.sleep(args.interval)
        if args.by == "heartbeat":
            heartbeat(step=step)
        else:
            print(f"step {step}")


def busy_then_idle(args: argparse.Namespace) -> None:
    """Burn CPU silently, then block forever silently (a collective that never returns)."""
    end = time.monotonic() + args.busy
    while time.monotonic() < end:
        sum(range(10000))
    mark(args.marker, "idle")
    forever()


def trap(args: argparse.Namespace) -> None:
    def on_signal(signum: int, frame: object) -> None:
        mark(args.marker, signal.Signals(signum).name)
        if signum == signal.SIGTERM:
            sys.exit(7)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, on_signal)
    print("ready")
    forever()


def tree(args: argparse.Namespace) -> None:
    """Leave processes behind: a child, a grandchild in its own session (a daemon), all ignoring SIGTERM
    with ``--ignore-term``; their pids go to ``--pids``."""
    preexec = (lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)) if args.ignore_term else None
    child = subprocess.Popen(["sleep", "1000"], preexec_fn=preexec)
    daemon_script = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    print(os.getpid(), flush=True)\n"
        "    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # let the parent's reader see the end\n"
        "    time.sleep(1000)\n"
    )
    daemon = subprocess.run(
        [sys.executable, "-c", daemon_script], stdout=subprocess.PIPE, text=True, preexec_fn=preexec
    )
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(args.pids, "w") as out:
        out.write(f"{os.getpid()} {child.pid} {daemon.stdout.strip()}\n")
    print("ready")
    if args.then == "sleep":
        forever()


def worker_restarts(args: argparse.Namespace) -> None:
    """Write down ``--count`` restarts of failed workers as trainguard's torchrun does, then exit 0."""
    from trainguard.pod import contract, workerevents

    path = os.environ[contract.ENV_WORKER_EVENTS]
    for number in range(args.count):
        failed = workerevents.failure(rank=number, local_rank=0, pid=10_000 + number, exitcode=-9)
        workerevents.append(
            path,
            workerevents.FAILED,
            failures=[failed],
            restarts_left=args.count - number - 1,
            max_restarts=args.count,
        )
        time.sleep(0.3)
    time.sleep(1.0)


def live_rounds(args: argparse.Namespace) -> None:
    """As two live workers of one pod (``trainguard.Live``): each writes down rounds 1 and 2 (rank 1 first),
    then a third worker ends before it formed any round (as the live launcher writes it); then exit 0."""
    from trainguard.pod import contract, workerevents

    path = os.environ[contract.ENV_WORKER_EVENTS]
    for number in (1, 2):
        for rank in (1, 0):
            workerevents.append(
                path,
                workerevents.REFORMED,
                pid=20_000 + rank,
                round=number,
                rank=rank,
                world_size=2,
                step=10 * (number - 1),
                origin="peer" if rank == 1 and number == 1 else "live",
                source="host:20000" if number == 1 else None,
                seconds=0.5,
                transfer_seconds=0.1,
                bytes=1024,
                cause=None if number == 1 else "RuntimeError: Connection closed by peer",
                at=time.time(),
            )
        time.sleep(0.3)
    workerevents.append(path, workerevents.LIVE_UNUSED, pid=20_002, local_rank=2, exit_code=1)
    time.sleep(1.0)


def forming(args: argparse.Namespace) -> None:
    """As torchrun between two rounds: silent and idle for ``--idle`` s (said to be forming with
    ``--say``), then steps with heartbeats for a second, then exit 0."""
    from trainguard.pod import contract, workerevents

    path = os.environ[contract.ENV_WORKER_EVENTS]
    if args.say:
        workerevents.append(path, workerevents.FORMING)
    time.sleep(args.idle)
    if args.say:
        workerevents.append(path, workerevents.STARTED)
    for step in range(10):
        heartbeat(step=step)
        time.sleep(0.1)


def quiet_then_io(args: argparse.Namespace) -> None:
    """Sleep without I/O (only ``stat`` calls, no reads or writes) until ``--go`` exists, then write a
    little every 0.1 s for ever: a suspended job that comes back."""
    mark(args.marker, "quiet")
    while not os.path.exists(args.go):
        time.sleep(0.1)
    mark(args.marker, "io")
    with open(os.devnull, "wb") as sink:
        while True:
            sink.write(b"x")
            sink.flush()
            time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--marker")
    modes = parser.add_subparsers(dest="mode", required=True)
    p = modes.add_parser("stuck")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--advance", action="store_true")
    p.add_argument("--exit-on-attempt", type=int, default=-1)
    p = modes.add_parser("chatty")
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--heartbeats", type=int, default=0)
    p = modes.add_parser("slow")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--interval", type=float, default=0.6)
    p.add_argument("--by", choices=["heartbeat", "output"], default="heartbeat")
    p = modes.add_parser("busy-then-idle")
    p.add_argument("--busy", type=float, default=1.0)
    modes.add_parser("trap")
    p = modes.add_parser("tree")
    p.add_argument("--pids", required=True)
    p.add_argument("--then", choices=["exit", "sleep"], default="exit")
    p.add_argument("--ignore-term", action="store_true")
    p = modes.add_parser("exit")
    p.add_argument("code", type=int)
    p = modes.add_parser("say-then-exit")
    p.add_argument("code", type=int)
    p.add_argument("--seconds", type=float, default=1.0)
    p = modes.add_parser("kill-self")
    p.add_argument("signal")
    p = modes.add_parser("bytes")
    p = modes.add_parser("worker-restarts")
    p.add_argument("--count", type=int, default=2)
    modes.add_parser("live-rounds")
    p = modes.add_parser("quiet-then-io")
    p.add_argument("--go", required=True)
    p = modes.add_parser("forming")
    p.add_argument("--idle", type=float, default=2.5)
    p.add_argument("--say", action="store_true")
    args = parser.parse_args()
    if args.mode == "exit":
        sys.exit(args.code)
    if args.mode == "say-then-exit":  # a line of output, a while, then the exit code
        print("ready", flush=True)
        time.sleep(args.seconds)
        sys.exit(args.code)
    if args.mode == "kill-self":
        os.kill(os.getpid(), signal.Signals[args.signal])
        forever()
    if args.mode == "bytes":
        sys.stdout.buffer.write(b"out \x00\xff no newline")
        sys.stdout.flush()
        sys.stderr.buffer.write(b"err line\n\xfe")
        return
    {
        "stuck": stuck,
        "chatty": chatty,
        "slow": slow,
        "busy-then-idle": busy_then_idle,
        "trap": trap,
        "tree": tree,
        "worker-restarts": worker_restarts,
        "forming": forming,
        "live-rounds": live_rounds,
        "quiet-then-io": quiet_then_io,
    }[args.mode](args)


if __name__ == "__main__":
    main()
