"""The one applier: every backend carries out the controller's actions by the same rules, with its own verbs.

A backend implements ``Verbs`` (launch a pod, remove one, write the status, ...: each verb does one thing
to one action and raises when it cannot) and its ``apply`` is ``apply_actions(verbs, actions)``. The rules
are here, once (the contract in ``trainguard.controller.backend`` states them):

- In order. Between two ``WriteStatus``, the actions on one pod (launch, removal, restart in place) run one
  after the other, and the rest (other pods, events, nudges, the discovery file) side by side where the
  backend runs things side by side (``Verbs.side_by_side``; in order on the ones that do not). Before the
  first launch of a batch, what its pods cannot be created without (``Verbs.before_launches``); beside the
  launches, what the job needs while its pods run but not to create them (``Verbs.beside_launches``: a
  Service that names them, a store they connect to once they start).
- A failed action is recorded under its key (``Verbs.record``) and the batch goes on: ``apply`` does not
  raise for it. A verb raises ``NotYet`` for an action that has to wait (recorded as transient: the
  controller issues it again) and one of ``Verbs.failures`` for one that failed. Anything else is a bug or
  a lost backend: it propagates, and the driver retries the whole reconcile.
- A status write that meets a newer stored status (``StatusConflict``) stops the batch: the conflict is
  recorded under the write's key, nothing after it is carried out (it was decided from a stale status), and
  the result says so, so that the driver reads the status again and decides again at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import Protocol

from trainguard.controller.backend import (
    Action,
    ActionError,
    Applied,
    EmitEvent,
    IsolateNode,
    LaunchPod,
    NotYet,
    NudgeSurvivors,
    ReleaseSurvivors,
    RestartInPlace,
    StatusConflict,
    TerminatePod,
    UpdateDiscovery,
    WriteStatus,
)

#: Failed actions a backend keeps per job for the controller to see (the newest).
MAX_ERRORS = 50


class Verbs(Protocol):
    """One backend's hands for one job and one batch."""

    @property
    def failures(self) -> tuple[type[Exception], ...]:
        """The exceptions that mean "this action failed" (recorded under its key, the batch goes on)."""

    def now(self) -> float: ...

    def keep_error(self, error: ActionError) -> None:
        """Keep a failed action for ``observe`` to report (``ErrorLog``)."""

    def batch(self, actions: Sequence[Action]) -> AbstractContextManager[object]:
        """Around the whole batch (a backend's one look at its nodes, its store's upkeep...)."""

    def before_launches(self) -> None:
        """What the pods of the job need before the first of them is created (access, secrets...)."""

    def beside_launches(self) -> Sequence[Callable[[], None]]:
        """What the job needs once its pods run, made side by side with its launches (a Service, a store):
        each call one thing, raising as a verb does."""

    def side_by_side(self, chains: Sequence[Callable[[], None]]) -> None:
        """Run independent chains of actions, side by side or one after the other, until all are done."""

    def launch(self, action: LaunchPod) -> None: ...

    def terminate(self, action: TerminatePod) -> None: ...

    def restart_in_place(self, action: RestartInPlace) -> None: ...

    def nudge(self, action: NudgeSurvivors) -> None: ...

    def release(self, action: ReleaseSurvivors) -> None: ...

    def update_discovery(self, action: UpdateDiscovery) -> None: ...

    def isolate_node(self, action: IsolateNode) -> None: ...

    def emit_event(self, action: EmitEvent) -> None: ...

    def write_status(self, action: WriteStatus) -> None:
        """Store the status; raise ``StatusConflict`` if the stored one is newer than the one read."""


def apply_actions(verbs: Verbs, actions: Sequence[Action]) -> Applied:
    """Carry ``actions`` out by the rules of the module's docstring."""
    with verbs.batch(actions):
        for segment, write in _segments(actions):
            _run_segment(verbs, segment)
            if write is None:
                continue
            try:
                verbs.write_status(write)
            except StatusConflict as conflict:
                verbs.keep_error(ActionError(write.key, f"status conflict: {conflict}", verbs.now()))
                return Applied(conflict=True)
            except NotYet as error:
                verbs.keep_error(ActionError(write.key, str(error), verbs.now(), transient=True))
            except verbs.failures as error:
                verbs.keep_error(ActionError(write.key, str(error), verbs.now()))
    return Applied()


def _segments(actions: Sequence[Action]) -> Iterator[tuple[list[Action], WriteStatus | None]]:
    """The actions between two status writes, each with the write that ends it (None after the last)."""
    between: list[Action] = []
    for action in actions:
        if isinstance(action, WriteStatus):
            yield between, action
            between = []
        else:
            between.append(action)
    if between:
        yield between, None


def _run_segment(verbs: Verbs, actions: list[Action]) -> None:
    if not actions:
        return
    first_launch = next((a for a in actions if isinstance(a, LaunchPod)), None)
    beside: list[Callable[[], None]] = []
    if first_launch is not None:
        _carry_out(verbs, first_launch.key, verbs.before_launches)
        beside = [partial(_carry_out, verbs, first_launch.key, call) for call in verbs.beside_launches()]
    if verbs.side_by_side is in_order:  # one thing at a time: in the order given, no chains to build
        for call in beside:
            call()
        for action in actions:
            _carry_out_action(verbs, action)
        return
    chains: dict[object, list[Action]] = {}
    for number, action in enumerate(actions):
        if isinstance(action, (LaunchPod, TerminatePod, RestartInPlace)):
            chains.setdefault(("pod", action.pod), []).append(action)
        elif isinstance(action, UpdateDiscovery):
            chains.setdefault("discovery", []).append(action)
        else:
            chains[number] = [action]
    verbs.side_by_side([*beside, *(partial(_run_chain, verbs, chain) for chain in chains.values())])


def _run_chain(verbs: Verbs, chain: list[Action]) -> None:
    for action in chain:
        _carry_out_action(verbs, action)


def _carry_out_action(verbs: Verbs, action: Action) -> None:
    """The backend's verb for ``action``, with its failure recorded under the action's key."""
    try:
        match action:
            case LaunchPod():
                verbs.launch(action)
            case TerminatePod():
                verbs.terminate(action)
            case RestartInPlace():
                verbs.restart_in_place(action)
            case NudgeSurvivors():
                verbs.nudge(action)
            case ReleaseSurvivors():
                verbs.release(action)
            case UpdateDiscovery():
                verbs.update_discovery(action)
            case IsolateNode():
                verbs.isolate_node(action)
            case EmitEvent():
                verbs.emit_event(action)
            case WriteStatus():  # never between two writes: each one ends a segment
                verbs.write_status(action)
    except NotYet as error:
        verbs.keep_error(ActionError(action.key, str(error), verbs.now(), transient=True))
    except verbs.failures as error:
        verbs.keep_error(ActionError(action.key, str(error), verbs.now()))


def _carry_out(verbs: Verbs, key: str, call: Callable[[], None]) -> None:
    try:
        call()
    except NotYet as error:
        verbs.keep_error(ActionError(key, str(error), verbs.now(), transient=True))
    except verbs.failures as error:
        verbs.keep_error(ActionError(key, str(error), verbs.now()))


def in_order(chains: Sequence[Callable[[], None]]) -> None:
    """``Verbs.side_by_side`` for a backend that does one thing at a time: its actions then run in the order
    given, and the applier builds no chains for it."""
    for chain in chains:
        chain()


class ErrorLog:
    """The failed actions of one job that ``observe`` reports, oldest first, the newest ``MAX_ERRORS``."""

    def __init__(self) -> None:
        self._errors: deque[ActionError] = deque(maxlen=MAX_ERRORS)

    def add(self, error: ActionError) -> None:
        self._errors.append(error)

    def errors(self) -> tuple[ActionError, ...]:
        return tuple(self._errors)
