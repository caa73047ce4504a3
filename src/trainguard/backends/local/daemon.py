"""The local control plane process: ``python -m trainguard.backends.local.daemon [--foreground]`` (the CLI
starts it; without ``--foreground`` it detaches from its starter by forking).

Exactly one runs per ``$TRAINGUARD_HOME``: it holds an exclusive ``flock`` on ``control.lock`` for its whole
life (the kernel drops it when the process dies, even by SIGKILL), and a second one exits at once. It serves
the local API on ``control.sock`` and runs the reconcile loop until told to stop, or until it has had nothing
to do for ``TRAINGUARD_IDLE_EXIT`` seconds (default 600; any trainguard command starts it again).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import sqlite3
import sys
import threading
from types import FrameType
from typing import Any

from trainguard.backends.local import client, metrics, ui, wire
from trainguard.backends.local.clock import Clock
from trainguard.backends.local.home import Home
from trainguard.backends.local.plane import ControlPlane
from trainguard.backends.local.podenv import inherited_environment
from trainguard.backends.local.service import USAGE, RequestError, Service
from trainguard.backends.local.statefile import StateError, check, damaged_message, is_damage
from trainguard.backends.local.store import Store

log = logging.getLogger("trainguard.local")

ENV_IDLE_EXIT = "TRAINGUARD_IDLE_EXIT"
#: Exit status of a control plane that found another one running (not an error).
ALREADY_RUNNING = 0
#: Exit status of a control plane that cannot use the state file (damaged, unreadable); it says why on
#: stderr (the log), which the command that started it shows (``client.UNUSABLE_STATE``).
UNUSABLE_STATE = client.UNUSABLE_STATE


def main(argv: list[str] | None = None) -> int:
    home = Home.from_env().ensure()
    # The lock is taken before detaching, so that a second control plane gives up inside the starter its
    # command waits for, and no loser outlives the command that started it. A forked child shares the
    # open lock with its parent, so the lock stays held after the starter exits.
    lock = open(home.lock_file, "a+")  # noqa: SIM115 - held for the life of the process
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return ALREADY_RUNNING
    try:  # before detaching: a state file that cannot be used is reported to the command that waits
        check(home.state_db)
        Store(home.state_db).close()  # brought to this version's tables; closed before forking
    except StateError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return UNUSABLE_STATE
    if "--foreground" not in (sys.argv[1:] if argv is None else argv) and os.fork() > 0:
        # The starter waits for this first process only; the control plane lives on in the child, whose
        # parent is then init (or a subreaper), so no command is left with a zombie to reap.
        os._exit(0)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr, force=True
    )
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    log.info("control plane %d starting in %s", os.getpid(), home.root)
    try:
        store = Store(home.state_db)
    except StateError as error:  # damaged since the check a moment ago
        log.error("%s", error)
        return UNUSABLE_STATE
    plane = ControlPlane(home, store, Clock(), inherited_environment())
    stop = threading.Event()
    stop_pods = threading.Event()

    def shutdown(with_pods: bool) -> None:
        if with_pods:
            stop_pods.set()
        stop.set()
        plane.waker.wake()

    def on_stop_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()  # the wakeup fd wakes the loop

    def on_child(signum: int, frame: FrameType | None) -> None:
        """An agent exited; the wakeup fd already woke the loop, which reaps it."""

    signal.signal(signal.SIGTERM, on_stop_signal)
    signal.signal(signal.SIGINT, on_stop_signal)
    signal.signal(signal.SIGCHLD, on_child)
    plane.waker.wake_on_signals()
    plane.recover()
    endpoint = metrics.serve(store, plane.stats)
    plane.metrics = endpoint.to_dict()
    server = _listen(home)
    service = Service(plane, shutdown)
    pages = ui.serve_pages(service)
    plane.ui = pages.to_dict()
    threading.Thread(target=_accept_loop, args=(server, service, stop), daemon=True, name="api").start()
    try:
        plane.run(stop, _idle_exit())
    except sqlite3.DatabaseError as error:  # the state file was damaged under us: nothing more can be done
        log.error("%s; this control plane stops", damaged_message(home.state_db, str(error)))
    finally:
        server.close()
        endpoint.close()
        pages.close()
        with contextlib.suppress(OSError):
            home.socket.unlink()
        if stop_pods.is_set():
            plane.stop_all_pods()
        store.close()
        log.info("control plane %d stopped", os.getpid())
    return 0


def _idle_exit() -> float | None:
    text = os.environ.get(ENV_IDLE_EXIT, "600")
    try:
        value = float(text)
    except ValueError:
        return 600.0
    return value if value > 0 else None


def _listen(home: Home) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        home.socket.unlink()  # left by a predecessor that was killed; we hold the lock, so it is stale
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)  # the socket is created 0600: only the owner may connect
    try:
        with wire.address(home.socket) as where:
            server.bind(where)
    finally:
        os.umask(previous)
    os.chmod(home.socket, 0o600)
    server.listen(64)
    server.settimeout(0.5)
    return server


def _accept_loop(server: socket.socket, service: Service, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            connection, _ = server.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        threading.Thread(target=_serve, args=(connection, service), daemon=True, name="request").start()


def _serve(connection: socket.socket, service: Service) -> None:
    with connection, connection.makefile("rb") as reader:
        connection.settimeout(None)
        if wire.peer_uid(connection) not in (None, os.getuid()):
            wire.send(connection, {"ok": False, "error": "permission denied", "exit_code": 1})
            return
        while True:
            try:
                request = wire.receive(reader)
            except (OSError, ValueError):
                return
            if request is None:
                return
            with contextlib.suppress(OSError):
                wire.send(connection, _answer(service, request))


def _answer(service: Service, request: Any) -> dict[str, Any]:
    if not isinstance(request, dict) or not isinstance(request.get("op"), str):
        return {"ok": False, "error": "malformed request", "exit_code": 2}
    args = request.get("args") or {}
    try:
        return {"ok": True, "result": service.handle(request["op"], dict(args))}
    except RequestError as error:
        return {"ok": False, "error": str(error), "exit_code": error.exit_code}
    except sqlite3.DatabaseError as error:  # the state file was damaged under us
        if not is_damage(error):
            return {"ok": False, "error": f"the state file is busy ({error}); try again", "exit_code": 1}
        path = service.plane.store.path
        return {"ok": False, "error": damaged_message(path, str(error), os.getpid()), "exit_code": USAGE}
    except Exception as error:  # a bug of ours: keep serving, tell the caller where to look
        log.exception("request %s failed", request.get("op"))
        return {"ok": False, "error": f"internal error: {type(error).__name__}: {error}", "exit_code": 70}


if __name__ == "__main__":
    sys.exit(main())
