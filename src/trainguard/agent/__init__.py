"""The in-pod agent: ``trainguard agent [options] -- CMD...`` supervises a training command in its pod.

It runs CMD in its own session (CMD's pid is its process group), relays CMD's stdout and stderr unchanged,
forwards SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 to CMD's process group, passes CMD's exit status
through unchanged (killed by signal N: 128+N), and leaves no process of the tree behind (it is the tree's
child subreaper). With a hang timeout it also restarts a hung CMD in place (restart upon suspension, as
ModelArts calls it).

Channels, the contract with the runtimes and the controller (see docs/agent.md):

- **Heartbeats in**: the agent makes a fresh directory and passes it to CMD as ``TRAINGUARD_HEARTBEAT_DIR``;
  ``trainguard.heartbeat(step=..., **metrics)`` replaces ``<dir>/rank-<RANK or 0>.json`` =
  ``{"step", "time", "pid", "rank", "metrics"}``. ``TRAINGUARD_ATTEMPT`` tells CMD which run it is (1, 2, ...).
- **Reports out**: JSON lines appended to ``--report``/``TRAINGUARD_REPORT_FILE`` (``trainguard.agent.report``
  lists the events and fields); the final line (``exited`` or ``gave-up``) also goes to the termination log
  (``TRAINGUARD_TERMINATION_LOG``, default ``/dev/termination-log`` when writable).
- **Configuration in**: options, or ``TRAINGUARD_HANG_*`` variables (``trainguard.agent.config``).
- **Exit status**: CMD's, unchanged; ``EXIT_HANG`` (137) after giving up on a hang; 127/126 when CMD
  cannot be found/run.

The agent imports only the standard library and ``trainguard.pod.hangsignal`` (it runs from a stdlib-only bundle in
users' own images, see ``trainguard.bundle``); detection logic is pure (``trainguard.agent.detector``).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainguard.agent.config import AgentConfig
    from trainguard.agent.detector import (
        Assessment,
        Hang,
        HangDetector,
        HangStreak,
        HeartbeatSample,
        Observation,
    )
    from trainguard.agent.supervisor import EXIT_HANG, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, Agent

#: Where each name of the package lives: imported when first asked for, so that a module that needs one part
#: of the agent (the operator's ``trainguard.agent.nudge``) does not load the supervisor.
_HOMES = {
    "AgentConfig": "config",
    **dict.fromkeys(
        ("Assessment", "Hang", "HangDetector", "HangStreak", "HeartbeatSample", "Observation"), "detector"
    ),
    **dict.fromkeys(("EXIT_HANG", "EXIT_NOT_EXECUTABLE", "EXIT_NOT_FOUND", "Agent"), "supervisor"),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{home}"), name)


__all__ = [
    "EXIT_HANG",
    "EXIT_NOT_EXECUTABLE",
    "EXIT_NOT_FOUND",
    "Agent",
    "AgentConfig",
    "Assessment",
    "Hang",
    "HangDetector",
    "HangStreak",
    "HeartbeatSample",
    "Observation",
]
