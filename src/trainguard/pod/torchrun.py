"""``python -m trainguard.pod.torchrun [torchrun options] SCRIPT [ARGS]``: torchrun with warm worker restarts.

The same elastic agent as ``torchrun`` (torch's own parser, rendezvous and restart logic), with one difference:
workers are forked from a server process that imported torch once, instead of each being a fresh interpreter.
torchrun restarts every worker of every pod whenever any worker dies or the membership changes, and a fresh
interpreter spends seconds importing torch (and torch._dynamo, which DistributedDataParallel loads) before the
script even starts; measured here, on 2 busy cores, the restart of a killed worker took 7-11 s that way and
about 3 s warm. The script runs as ``python SCRIPT`` would run it: ``__name__ == "__main__"``, ``sys.argv``,
and its directory first on ``sys.path`` (``-m MODULE`` runs as ``python -m MODULE``).

What differs from a fresh interpreter: the worker starts with the modules of ``PRELOAD`` (and
``$TRAINGUARD_PRELOAD``, comma-separated) already imported, and it is a child of the fork server rather than of
the agent. The fork server is multiprocessing's, forked from the agent once the agent has imported those
modules (not a fresh interpreter that imports them again: one import of torch per pod start, not two, 2-3 s of
CPU saved each time); its command line is the agent's, its name ``tg-forkserver``
(``workerevents.FORK_SERVER_NAME``). Python options (``-O``, ``-W``...) cannot apply to a forked interpreter;
trainguard starts plain torchrun for such commands, and for commands that choose ``--start-method``, ``--no-python`` or ``--run-path``.

Under trainguard's agent (``TRAINGUARD_WORKER_EVENTS`` set) torch's agent also writes down for trainguard's
(``trainguard.pod.workerevents``) each restart of failed workers it carries out, so that the restart shows in the
job's history although no pod ended, and when it re-forms the group, so that a round being formed is not
taken for a hang.

``python -m trainguard.pod.torchrun --live ...`` runs a live job's workers instead (``trainguard.pod.livelaunch``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import runpy
import stat
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from multiprocessing import util as multiprocessing_util
from typing import Any, NoReturn

from trainguard.pod import contract, storelink, workerevents

#: Imported once in the fork server: torch, what DDP and the elastic agent's worker wrapper load on first
#: use (torch._dynamo alone is seconds), numpy, and the SDK.
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.nn.parallel",
    "torch._dynamo",
    "torch.utils.data",
    "torch.distributed.elastic.multiprocessing",
    "numpy",
    "trainguard.sdk",
)


#: The process name the fork server had before it took ``FORK_SERVER_NAME`` (set in the fork server only): its
#: workers take it back.
_worker_name: str | None = None


def run_target(module: bool, target: str, *args: str) -> None:
    """A worker's entrypoint: ``target`` (a script path, or a module with ``module``) as ``__main__``."""
    if _worker_name is not None:
        _set_process_name(_worker_name)
    sys.argv = [target, *args]
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            raise


def _warm(
    original: Callable[[Any], tuple[Any, Any, list[Any]]],
) -> Callable[[Any], tuple[Any, Any, list[Any]]]:
    """Wraps torch's ``config_from_args``: the same configuration, a forked worker instead of ``python -u``."""

    def config_from_args(args: Any) -> tuple[Any, Any, list[Any]]:
        config, command, command_args = original(args)
        if args.no_python or args.run_path:
            return config, command, command_args
        # torch's arguments for ``python``: "-u", "-m" for a module, then the target and its arguments.
        rest = list(command_args[2:] if args.module else command_args[1:])
        config.start_method = "forkserver"
        return config, run_target, [bool(args.module), *rest]

    return config_from_args


def poll_rendezvous_every(poll: float) -> bool:
    """Make torch's c10d rendezvous poll its state every ``poll`` seconds instead of every second; False when
    torch's rendezvous is not laid out as expected (nothing is changed then)."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rendezvous

    holder_init = rendezvous._BackendRendezvousStateHolder.__init__
    delay = getattr(rendezvous, "_delay", None)
    if holder_init.__defaults__ != (1,) or not callable(delay):
        return False
    # The state is read again only once the cached copy is this old...
    holder_init.__defaults__ = (poll,)

    # ...and a waiting agent sleeps this long between looks (the other delay is a start-up jitter, kept).
    def poll_delay(seconds: float | tuple[float, float]) -> None:
        delay(seconds=poll if seconds == 1 else seconds)

    rendezvous._delay = poll_delay  # type: ignore[attr-defined]
    return True


#: How long an agent waits for a lost rendezvous store to come back before its operation fails (and the agent
#: with it): the store's pod on a node that is lost is created again once the node is seen NotReady (about 40 s)
#: and then scheduled and started elsewhere. Meanwhile no round can form anyway.
STORE_RETURN_S = 300.0


def reconnect_to_the_rendezvous_store() -> bool:
    """Make the c10d rendezvous' store, where this agent is only its client (``is_host=false``, as trainguard
    runs every agent), one that connects again when the store's server is lost and comes back on its address
    (its pod created again, ``trainguard.pod.storelink``): with torch's own client every later operation fails,
    the agent with it, and every pod of the job ends. The store comes back empty: the first agent back puts the
    round it last saw there (``RendezvousKey``), and the rendezvous goes on from it. False where torch's backend
    is not laid out as expected (nothing is changed then)."""
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend

    create = getattr(backend, "_create_tcp_store", None)
    endpoint = getattr(backend, "parse_rendezvous_endpoint", None)
    empty = getattr(getattr(backend, "C10dRendezvousBackend", None), "_NULL_SENTINEL", None)
    if not callable(create) or not callable(endpoint) or not isinstance(empty, str):
        return False

    def reconnecting(params: Any) -> Any:
        store = create(params)
        if params.get_as_bool("is_host") is not False:  # this agent may serve the store itself
            return store
        host, port = endpoint(params.endpoint, default_port=getattr(backend, "DEFAULT_PORT", 29400))
        address, timeout = f"{host}:{port}", store.timeout
        link = storelink.Link(
            address,
            lambda seconds: storelink.open_tcp(address, seconds, timeout),
            (dist.DistNetworkError,),
            who="torchrun's rendezvous",
            within=STORE_RETURN_S,
        )
        reconnecting_store = _rendezvous_store_class()(storelink.Connection(link, store))
        reconnecting_store.rendezvous_key = RendezvousKey(f"torch.rendezvous.{params.run_id}", empty)
        link.on_reconnect(reconnecting_store.rendezvous_key.put_back)  # held weakly: the store keeps it
        return reconnecting_store

    backend._create_tcp_store = reconnecting
    return True


class RendezvousKey:
    """The c10d backend's key (its rendezvous' state) as this agent last read or wrote it, put back in a store
    that came back empty: the round the agents train in, so that a pod that joins is seen waiting and the
    agents that train make room for it, as with the old store. With no state there, the agents that train
    would be in no round, and a pod that joins would wait, alone, for a round of its own. Until the agent has
    seen one, the backend's empty state, as its start puts it (torch's backend ``get``s the key, which waits a
    minute for a missing key, then fails)."""

    def __init__(self, key: str, empty: str) -> None:
        self.key = key
        self.value: Any = empty

    def seen(self, key: str, value: Any) -> None:
        if key == self.key and value:
            self.value = value

    def put_back(self, client: Any) -> None:
        client.compare_set(self.key, "", self.value)  # the first agent back puts it; the others find it there


@functools.lru_cache(maxsize=1)
def _rendezvous_store_class() -> type:
    """``trainguard.pod.storelink``'s reconnecting store, noting each value of the rendezvous' key that passes
    through it (``RendezvousKey.seen``)."""

    class RendezvousStore(storelink.store_class()):  # type: ignore[misc]
        rendezvous_key: RendezvousKey

        def get(self, key: str) -> bytes:
            value = super().get(key)
            self.rendezvous_key.seen(key, value)
            return value  # type: ignore[no-any-return]

        def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
            value = super().compare_set(key, expected, desired)
            self.rendezvous_key.seen(key, value)
            return value  # type: ignore[no-any-return]

    return RendezvousStore


class _TracebackAsText(logging.Filter):
    """Writes a record's traceback as text before torch's formatter sees it, and leaves it no exception to
    format: torch's formatter imports torch._dynamo (its config) for the first record that carries one."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = self._formatter.formatException(record.exc_info)
            record.exc_info = None
        return True


def format_tracebacks_without_dynamo() -> int:
    """torch's log handlers (those whose formatter is torch's) get ``_TracebackAsText``: the agent logs a
    worker's failure with its traceback, and torch's formatter would import torch._dynamo for it, seconds of CPU
    in the middle of every job's first recovery, in a process that compiles nothing. The same lines are
    written. Returns how many handlers it filters."""
    try:
        import torch._logging._internal as torch_logging
    except ImportError:  # another torch's layout: its formatter is left as it is
        return 0
    formatter = getattr(torch_logging, "TorchLogsFormatter", None)
    filtered = 0
    if not isinstance(formatter, type):
        return filtered
    loggers = [
        logging.getLogger(),
        *(logging.getLogger(name) for name in list(logging.root.manager.loggerDict)),
    ]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler.formatter, formatter) and not any(
                isinstance(f, _TracebackAsText) for f in handler.filters
            ):
                handler.addFilter(_TracebackAsText())
                filtered += 1
    return filtered


def preload_modules(environ: dict[str, str] | os._Environ[str] = os.environ) -> list[str]:
    extra = [name.strip() for name in environ.get(contract.ENV_PRELOAD, "").split(",") if name.strip()]
    return [*PRELOAD, *extra]


def start_fork_server(modules: list[str]) -> bool:
    """Imports ``modules`` here, then starts multiprocessing's fork server (which preloads them) as a fork of
    this process: its preload finds them imported. Returns False where it started the server as
    multiprocessing does (a fresh interpreter, which imports them again): when a Python thread of this process
    already runs (a fork would copy its locks in whatever state they are), or where multiprocessing does not
    start it by ``util.spawnv_passfds`` with ``-c CODE``, as Pythons 3.8-3.13 do."""
    multiprocessing.set_forkserver_preload(modules)
    for name in modules:
        # As the fork server's preload: a module that is missing is left to the worker that needs it.
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    spawn = getattr(multiprocessing_util, "spawnv_passfds", None)
    if threading.active_count() > 1 or spawn is None:
        multiprocessing.forkserver.ensure_running()
        return False
    forked: list[int] = []

    def fork_instead(path: str, args: list[str], passfds: Sequence[int]) -> int:
        if "-c" not in args[:-1]:
            return int(spawn(path, args, passfds))
        code = args[args.index("-c") + 1]
        pid = os.fork()
        if pid == 0:
            _serve_forked(code, passfds)
        forked.append(pid)
        return pid

    multiprocessing_util.spawnv_passfds = fork_instead  # type: ignore[assignment]
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        multiprocessing_util.spawnv_passfds = spawn
    return bool(forked)


def _serve_forked(code: str, passfds: Sequence[int]) -> NoReturn:
    """The fork server, in the forked child: runs multiprocessing's own start code (``code``) and never returns
    into the agent's. It closes its copies of the pipes it is passed the other end of (the agent's end of the
    "alive" pipe, whose closing tells the server that the agent is gone), as a fresh interpreter would not
    have had them, and takes the name ``FORK_SERVER_NAME``."""
    global _worker_name
    status = 1
    try:
        passed = set(passfds)
        pipes = set()
        for fd in passed:
            info = os.fstat(fd)
            if stat.S_ISFIFO(info.st_mode):
                pipes.add((info.st_dev, info.st_ino))
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd in passed:
                continue
            try:
                info = os.fstat(fd)
            except OSError:  # the listing's own descriptor, closed by now
                continue
            if stat.S_ISFIFO(info.st_mode) and (info.st_dev, info.st_ino) in pipes:
                os.close(fd)
        _worker_name = _process_name()
        _set_process_name(workerevents.FORK_SERVER_NAME)
        exec(code, {"__name__": "__trainguard_fork_server__"})
        status = 0
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def _process_name() -> str | None:
    """This process's name (``/proc/self/comm``); ``trainguard.agent.proc.name`` reads the same, but importing
    the agent's package here would load it into the fork server and every worker."""
    try:
        with open("/proc/self/comm", encoding="utf-8") as file:
            return file.read().strip()
    except OSError:
        return None


def _set_process_name(name: str) -> None:
    try:
        with open("/proc/self/comm", "w", encoding="utf-8") as file:
            file.write(name)
    except OSError:  # no /proc: the name only helps the agent find the workers
        pass


def main(argv: Sequence[str] | None = None) -> None:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["--live"]:  # a live job: the workers form their rounds themselves
        from trainguard.pod import livelaunch

        sys.exit(livelaunch.main(arguments[1:]))
    start_fork_server(preload_modules())
    from torch.distributed import run as torchrun

    format_tracebacks_without_dynamo()
    poll = os.environ.get(contract.ENV_RDZV_POLL_SECONDS)
    if poll:
        poll_rendezvous_every(float(poll))
    reconnect_to_the_rendezvous_store()
    events = os.environ.get(contract.ENV_WORKER_EVENTS)
    if events:
        report_worker_events(events)
    options = torchrun.parse_args(arguments)  # type: ignore[no-untyped-call]
    if not (options.no_python or options.run_path):
        torchrun.config_from_args = _warm(torchrun.config_from_args)  # type: ignore[assignment]
        # Join the rendezvous only once workers can start at once: a pod that joins while its fork server is
        # still importing would hold every other pod's restarted workers waiting for its own.
        wait_for_fork_server()
    torchrun.main(arguments)  # parses them again, under torch's error recording


def report_worker_events(path: str) -> None:
    """Make torch's agent write down each round it forms and starts, and every group failure it will restart
    the workers after (it restarts while ``--max-restarts`` has some left; after that torchrun exits, and the
    pod's end says it)."""
    from torch.distributed.elastic.agent.server.api import WorkerState
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    monitor = LocalElasticAgent._monitor_workers
    initialize = LocalElasticAgent._initialize_workers

    def monitor_workers(self: Any, worker_group: Any) -> Any:
        result = monitor(self, worker_group)
        left = self._remaining_restarts
        if result.state in (WorkerState.FAILED, WorkerState.UNHEALTHY) and left > 0:
            failures = [  # keyed by global rank
                workerevents.failure(rank, failed.local_rank, failed.pid, failed.exitcode)
                for rank, failed in sorted(result.failures.items())
            ]
            workerevents.append(
                path,
                workerevents.FAILED,
                failures=failures,
                restarts_left=left - 1,
                max_restarts=worker_group.spec.max_restarts,
            )
        return result

    def initialize_workers(self: Any, worker_group: Any) -> Any:
        """A rendezvous, then the round's workers started (the first round, and every restart's)."""
        workerevents.append(path, workerevents.FORMING)
        result = initialize(self, worker_group)
        workerevents.append(path, workerevents.STARTED)
        return result

    LocalElasticAgent._monitor_workers = monitor_workers  # type: ignore[method-assign]
    LocalElasticAgent._initialize_workers = initialize_workers  # type: ignore[method-assign]


def wait_for_fork_server() -> None:
    """Returns once the fork server has imported ``PRELOAD`` (it forks a process that does nothing)."""
    probe = multiprocessing.get_context("forkserver").Process(target=_nothing, name="trainguard-warmup")
    probe.start()
    probe.join()


def _nothing() -> None:
    """The probe's work."""


if __name__ == "__main__":
    main()
