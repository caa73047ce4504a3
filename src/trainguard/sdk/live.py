"""Live mode: the workers that survive a fault keep their process, their model and optimizer where they are
(on the GPU for a GPU job), and go on training with the new membership; a newcomer receives the current state
from one survivor.

Usage (a DDP script; ``train`` is entered again, in the same process, after each re-formation)::

    live = trainguard.Live({"model": model, "optimizer": optimizer, "sampler": sampler})

    def train(live):
        ddp = DDP(model, init_sync=False)              # the default group is the live round's
        sampler.resize(live.world_size, live.rank)     # the new world
        for step in live.steps(total_steps):           # from the step every member agrees on
            ...
            optimizer.step()

    live.run(train)

How a round forms (``trainguard.sdk._rounds`` decides, the job's rendezvous store carries it): each process
arrives in round n with the step its state is at; the round closes when every member of round n-1 has arrived
or is known absent (its agent marked it gone, or it stopped beating for ``stale_after``); the survivors keep
their order, the newcomers follow. Each member then makes the round's gloo group (torch.distributed's default
group, under the round's prefix) and the members behind the agreed step receive it from one that holds it.

How a collective is left: a member that fails (a peer's connection closed, a collective timed out after
``timeout`` s) arrives in the next round; every member's watchdog (``trainguard.sdk._watchdog``) sees that
arrival, a member marked gone, or a member silent (no beat for ``stale_after`` s) and ends its round's group
(``trainguard.sdk._roundgroup``), so the collective it waits in fails at once and it arrives too. A newcomer's
arrival ends the round at the next step's boundary: the job grows within a step. Before an optimizer applies a
step every member agrees that all finished its collectives (``trainguard.sdk._nccl.agree``): a step is applied
by every member or by none.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from trainguard.pod import contract, workerevents
from trainguard.pod.contract import LiveKeys
from trainguard.pod.workerevents import Formation
from trainguard.sdk import _livestate, _nccl, _sharded, _spare, _transfer
from trainguard.sdk._roundgroup import RoundGroup
from trainguard.sdk._rounds import Failures, Formed
from trainguard.sdk._roundstore import LiveError, RoundStore, connect, default_store, finish_within
from trainguard.sdk._watchdog import Watchdog
from trainguard.sdk._world import env_int

#: A member whose beats (``trainguard.sdk._watchdog``) stop for this long is taken for silent (its processes
#: frozen, its node gone): its round is left at once and the next forms without it. It can come back: it
#: arrives in a later round. Beats come from a thread of their own, so a long step never stops them.
STALE_AFTER = 1.5
#: A newcomer's arrival (nobody lost) is met at the members' next step boundary, not by aborting the step in
#: progress; one still not met after this long (a loop that seldom completes a step) aborts it after all.
JOIN_AT_BOUNDARY_WITHIN = 10.0
#: The most members that send the state to a round's newcomers together, each a share of its buckets.
MAX_SENDERS = 4
#: The rounds' process group backends: gloo (CPU, or CUDA tensors staged through the host), NCCL (GPUs). The
#: state transfer goes over a gloo group of its own either way.
BACKENDS = ("gloo", "nccl")


class _JoinAtBoundary(RuntimeError):
    """Raised by ``advance`` at a step boundary: a newcomer waits in the next round, nobody was lost."""


class Live:
    """The live re-formation of a ``torch.distributed`` job around ``state`` (name -> an object with
    ``state_dict()`` and ``load_state_dict()``: the model, the optimizer, the sampler, a scheduler...). A sharded
    state (FSDP2) is made by ``build(mesh)`` in each round, over the round's mesh (``trainguard.sdk._sharded``)."""

    def __init__(
        self,
        state: dict[str, Any],
        *,
        store: str | None = None,
        prefix: str | None = None,
        size: int | None = None,
        minimum: int | None = None,
        timeout: float | None = None,
        stale_after: float = STALE_AFTER,
        join_timeout: float = 600.0,
        poll: float = 0.05,
        device: Any = None,
        restore: Callable[[], tuple[int, str] | None] | None = None,
        backend: str = "gloo",
        warmup: Callable[[], Any] | None = None,
        build: Callable[[Any], dict[str, Any]] | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"Live(backend={backend!r}): one of {', '.join(BACKENDS)}")
        if not state and build is None:
            raise ValueError("Live(state): name at least one object to keep (e.g. {'model': model})")
        _sharded.check(state, build, backend)
        for name, obj in state.items():
            if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                raise TypeError(
                    f"Live(state): state[{name!r}] is a {type(obj).__name__}, which has no state_dict() and "
                    "load_state_dict(); pass the model, optimizer or sampler itself"
                )
        self.state = state
        #: A sharded state's copies and re-sharding (``trainguard.sdk._sharded``); None for a whole state (DDP).
        self.sharded = _sharded.Sharded(build) if build is not None else None
        self.member = contract.member_id()
        self.size = size if size is not None else env_int(contract.WORLD_SIZE, 1)
        self.minimum = minimum if minimum is not None else env_int(contract.ENV_LIVE_MINIMUM, 1)
        self.timeout = (
            timeout if timeout is not None else float(os.environ.get(contract.ENV_LIVE_TIMEOUT) or 60.0)
        )
        self.stale_after = stale_after
        self.join_timeout = join_timeout
        self.poll = poll
        self.device = device
        self.restore = restore
        self.backend = backend
        self.warmup = warmup
        #: Seconds the warm-up took in this process; None when it did not run (see ``_warm_up``).
        self.warmup_seconds: float | None = None
        #: A hot spare's call by its launcher (whose place it took, when); None for any other process.
        self.called: _spare.Called | None = None
        self.prefix = (
            prefix
            or os.environ.get(contract.ENV_LIVE_PREFIX)
            or contract.live_prefix(os.environ.get(contract.TORCHELASTIC_RUN_ID, "job"))
        )
        self.keys = LiveKeys(self.prefix)
        self.rank = 0
        self.world_size = 0
        #: Steps completed (by the agreement of the last formation and ``steps`` since).
        self.step = 0
        self.round = 0
        self.formations: list[Formation] = []
        self._address = store or default_store()
        self._client = connect(self._address)
        self._watch = connect(self._address)
        self.rounds = RoundStore(self._client, self.keys, self.member, self.poll)
        #: The step the state is at: ``step``, or one more once the optimizer applied the step in progress.
        self._state_step = -1
        #: Rounds failed in a row (``Failures``: it gives up after a few of the same members).
        self._failures = Failures()
        #: The round's groups, and the previous rounds' until a step of this one is done.
        self.group = RoundGroup(self._client, self.keys, backend, self.timeout)
        #: Every member agrees before an optimizer applies a step (``_agree``): seconds spent, and how often.
        self.agreements = 0
        self.agreement_seconds = 0.0
        self._agreeing = False
        if backend == "nccl":
            _nccl.prepare()
        _livestate.before_each_step(self.state, self._agree)
        _livestate.after_each_step(self.state, self._applied)
        self.watchdog = Watchdog(
            self._watch,
            self.rounds,
            self.keys,
            self.member,
            poll=self.poll,
            stale_after=self.stale_after,
            join_within=JOIN_AT_BOUNDARY_WITHIN,
            abort=self._abort,
        )
        self.watchdog.start()
        atexit.register(self.close)

    # -- what the training function uses ------------------------------------------------------------------

    def steps(self, total: int) -> Iterator[int]:
        """The steps from the agreed one up to ``total``; a step counts as completed when the next is asked."""
        while self.step < total:
            yield self.step
            self.advance()

    def advance(self) -> None:
        """The step in progress is complete (for loops that do not use ``steps``, e.g. over epochs)."""
        if self.sharded is not None:  # its shard's copy kept by its buddy first (a fault raises here)
            self.sharded.commit(self.state, self.step + 1)
        self.step += 1
        self._state_step = self.step
        self._failures.stepped()
        self.group.free()
        if self.watchdog.join_pending.is_set():
            raise _JoinAtBoundary(f"a newcomer waits in round {self.round + 1}")

    @property
    def origin(self) -> str | None:
        return self.formations[-1].origin if self.formations else None

    def run(self, train: Callable[[Live], Any]) -> Any:
        """Forms the first round, calls ``train(self)``, and after each fault of a collective forms the next
        round and calls it again, until it returns. Any other exception ends the run, as it would without."""
        cause: str | None = None
        self._warm_up()
        self._wait_as_spare()
        started = time.monotonic()
        while True:
            try:
                self._form(cause, started)
                result = train(self)
            except LiveError:
                raise
            except _JoinAtBoundary as error:  # no fault: the step is complete, the group idle
                self._trace(f"round {self.round} left at step {self.step}: {error}")
                started = time.monotonic()
                cause = "join"
                del error
                self._leave_group()
                continue
            except RuntimeError as error:  # torch's collective errors (DistError included) are RuntimeErrors
                # A fault while training, or while the round formed (a member lost while its group was made,
                # the sender lost in the middle of a state transfer): the next round, where another member
                # sends the state, or the restore. The round's connections shut down now: every operation
                # still queued fails at once, not at its timeout. The error (its frames hold the round's DDP)
                # is kept until the next round has completed a step (``RoundGroup``).
                self._trace(f"round {self.round} failed: {_cause(error)}")
                self._abort(_cause(error))
                self.group.bury(error)
                if self._failures.failed():
                    raise LiveError(
                        f"live mode: {self._failures.in_a_row} rounds in a row of the same members "
                        f"({', '.join(self._failures.members or ())}) failed with no step completed; the last "
                        f"error: {error}"
                    ) from error
                started = time.monotonic()
                cause = _cause(error)
                del error
                self._leave_group()
                continue
            self._finish()
            self.close()
            return result

    def _finish(self) -> None:
        """The run ended: this member marks itself finished, and keeps its group and its beats until every other
        member of its round has ended its run too, or left the round (``finish_within`` bounds the wait). Members
        end their last collective at different moments; one that left at once would fail a slower member's last
        collective, and that member would form a round without it."""
        with contextlib.suppress(Exception):  # a store that does not answer: nothing to wait for
            self._client.set(self.keys.finished(self.member), str(self.step))
            within = finish_within(self.timeout)
            self.rounds.wait_while_running(self.round, self.watchdog.members, self.stale_after, within)

    def close(self) -> None:
        """Leaves the job: marks this member gone (the others need not wait for it) and ends the group."""
        if self.watchdog.stop.is_set():
            return
        self.watchdog.stop.set()
        with contextlib.suppress(Exception):
            self._client.set(self.keys.gone(self.member), "1")
        self._leave_group()

    def _warm_up(self) -> None:
        """Runs ``warmup`` once, before this process first arrives, when it joins a job already training
        (``trainguard.sdk._livestate.warm_up``); at the job's start every member is as cold as the others."""
        warmup = self.warmup if self.sharded is None else self.sharded.warm_up(self.warmup)
        if warmup is None or (self.rounds.latest() == 0 and not _spare.is_spare()):
            return
        self.warmup_seconds = _livestate.warm_up(self.state, warmup, _cause)
        if self.warmup_seconds is not None:
            self._trace(f"warmed up in {self.warmup_seconds} s")

    def _wait_as_spare(self) -> None:
        """A hot spare (``trainguard.sdk._spare``), warm, holds no rank until its launcher calls it; one released
        uncalled leaves the job and ends its process (exit status 0) without training."""
        if not _spare.is_spare():
            return
        self._trace("a spare, warm: waiting to be called")
        try:
            self.called = _spare.wait_for_call()
        except _spare.Released as released:
            self._trace(str(released))
            self.close()
            raise SystemExit(0) from None
        if self.called is not None:
            self._trace(f"called in place of local rank {self.called.replaces}")

    # -- forming a round ----------------------------------------------------------------------------------

    @property
    def mesh(self) -> Any:
        """A sharded state's device mesh for the round (``build``'s argument); None for a whole state."""
        return self.sharded.mesh if self.sharded is not None else None

    def _form(self, cause: str | None, started: float) -> None:
        held = self._state_step if self.sharded is None else self.sharded.held_step()
        latest = self.rounds.latest()
        n = max(self.round, latest) + 1
        while True:
            self._trace(f"arriving in round {n} at step {held}")
            formed = self.rounds.join(
                n,
                held,
                self.size if n == 1 else self.minimum,
                self.stale_after,
                self.timeout,
                self.join_timeout,
                frozenset(self.watchdog.silent),
            )
            self._trace(f"round {n} closed: {formed}")
            if formed is not None:
                break
            n += 1
        self.round, self.rank, self.world_size = (
            formed.round,
            formed.rank_of(self.member),
            len(formed.members),
        )
        self._failures.formed(formed.members)
        # The round watched from now on: a member lost while the groups are made or the state moves (it never
        # writes its keys, or stops sending) ends the round at once (``_abort``), not at the round's bound.
        self.group.begin()
        self.watchdog.watching(formed.round, formed.members)
        with self._client.interrupted_by(self.group.ended):
            self._make_group(formed)
            self._trace(f"round {formed.round}: group made, rank {self.rank} of {self.world_size}")
            moved = time.monotonic()
            origin, sent = self._settle_state(formed)
        self._trace(f"round {formed.round}: state {origin}, {sent} bytes")
        if formed.step >= 0 and self.sharded is None:
            self.step = formed.step
        self._state_step = self.step
        _livestate.zero_grads(self.state)
        now = time.monotonic()
        self.formations.append(
            Formation(
                round=formed.round,
                rank=self.rank,
                world_size=self.world_size,
                step=self.step,
                origin=origin,
                source=formed.source,
                seconds=round(now - started, 3),
                transfer_seconds=round(now - moved, 3),
                bytes=sent,
                cause=cause,
                at=time.time(),
            )
        )
        self._agreeing = True
        self._tell_agent(self.formations[-1])
        mark = os.environ.get(contract.ENV_LIVE_MARK)
        if mark and len(self.formations) == 1:
            with contextlib.suppress(OSError):
                (Path(mark) / str(os.getpid())).touch()

    def _tell_agent(self, formation: Formation) -> None:
        """One ``reformed`` line for the pod's agent (``trainguard.pod.workerevents``): the job's history records
        each round. A write that fails is dropped (training must not fail for it)."""
        path = os.environ.get(contract.ENV_WORKER_EVENTS)
        if not path:
            return
        workerevents.append(path, workerevents.REFORMED, pid=os.getpid(), **formation.as_dict())

    def _make_group(self, formed: Formed) -> None:
        self.group.make(formed.round, self.rank, self.world_size)

    def _leave_group(self) -> None:
        self._agreeing = False
        self.group.leave()

    def _settle_state(self, formed: Formed) -> tuple[str, int]:
        """Puts the agreed state in place: (where it came from, bytes moved here)."""
        if self.sharded is not None:

            def regroup(rank: int) -> None:  # each member in the slot of the shard it holds
                self.group.make(formed.round, rank, self.world_size, again=1)

            origin, moved, self.step, self.rank = self.sharded.settle(
                formed.round, formed.members, self.rank, self.state, self.restore, self.step, regroup
            )
            _livestate.before_each_step(self.state, self._agree)  # the optimizers built for the round
            _livestate.after_each_step(self.state, self._applied)
            return origin, moved
        senders = formed.holders[:MAX_SENDERS]
        receivers = formed.receivers
        origin_of_source = "live"
        if not senders:  # nobody holds a state: the first member restores one or keeps its own fresh one
            senders = formed.members[:1]
            receivers = formed.members[1:]
            origin_of_source = "fresh"
            if self.member == senders[0] and self.restore is not None:
                restored = self.restore()
                if restored is not None:
                    self.step, origin_of_source = restored
        if self.member not in senders and self.member not in receivers:
            return "live", 0
        if not receivers:
            return origin_of_source, 0
        party = [*senders, *receivers]
        group = self.group.transfer(formed.round, party.index(self.member), len(party))
        body_key = self.keys.skeleton(formed.round)
        try:
            if self.member in senders:
                body, tensors = _transfer.skeleton_of(self.state)
                if self.member == senders[0]:
                    self._client.set(self.keys.step(formed.round), str(self.step))
                    self._client.set(body_key, body)
                me = senders.index(self.member)
                return origin_of_source, _transfer.send(group, tensors, len(senders), me)
            body = self._client.get(body_key)
            dicts, received = _transfer.receive(
                group, body, _livestate.device_of(self.state, self.device), len(senders)
            )
            _transfer.load(self.state, dicts)
            self.step = int(self._client.get(self.keys.step(formed.round)))
            return "peer", received
        except BaseException:
            self.group.bury(group)  # freed with the failed round's other groups (see ``run``)
            raise

    # -- leaving a round ---------------------------------------------------------------------------------

    def _trace(self, what: str) -> None:
        if os.environ.get(contract.ENV_LIVE_TRACE) == "1":
            print(f"[trainguard live {time.time():.3f} {self.member}] {what}", file=sys.stderr, flush=True)

    def _abort(self, why: str) -> None:
        """Ends the round's group at once, so the collective waiting fails (``RoundGroup.abort``), from the
        watchdog's thread while the training thread waits, or from the training thread after a fault."""
        self.watchdog.broken.set()
        shut = self.group.abort()
        self._trace(f"round {self.round} aborted ({why}): {shut} connections shut down")

    def _agree(self, *_: Any) -> None:
        """Before an optimizer applies a step: every member of the round agrees that it finished the step's
        collectives (``trainguard.sdk._nccl.agree``: a one-element all-reduce whose value is read back, so on
        NCCL the step's collectives have completed, not only been enqueued). A round broken meanwhile, or a
        member that did not finish, raises here: no member applies the step, and the next round starts from
        the last step every member applied."""
        if not self._agreeing:
            return
        if self.watchdog.broken.is_set():
            raise RuntimeError(f"live: round {self.round} broke before step {self.step} was applied")
        started = time.perf_counter()
        _nccl.agree(self.backend, _livestate.device_of(self.state, self.device))
        self.watchdog.heard_from_all()
        self.agreement_seconds += time.perf_counter() - started
        self.agreements += 1

    # -- helpers ------------------------------------------------------------------------------------------

    def _applied(self, *_: Any) -> None:
        """An optimizer applied the step in progress: the state is one step further."""
        self._state_step = self.step + 1


def _cause(error: BaseException) -> str:
    """What ended a round, for its record: the error's type and the start of its first line."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if text.startswith("[") and "] " in text:  # gloo's "[file.cc:553] ": where, not what
        text = text.split("] ", 1)[1]
    return f"{type(error).__name__}: {text[:120]}"
