"""``Checkpointer``: checkpoints that survive a kill at any moment, written without stalling training.

Files are ``<dir>/ckpt-<step, 12 digits>.pt``; the step in the name orders them, so no manifest is needed. A
checkpoint gets that name only once it is complete: it is written to a hidden temporary file in the same
directory, flushed and fsynced, renamed, and the directory is fsynced. A kill mid-write leaves only a temporary
file, which never looks like a checkpoint (and is removed by a later ``Checkpointer`` once it is an hour old).
Each file holds ``{"format": FORMAT, "step": step, "state": state}`` written by ``torch.save``.

Only rank 0 writes by default (every rank holds the same replicated state under DDP); all ranks can read.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import os
import re
import signal
import threading
import time
import typing
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from trainguard.sdk._snapshot import Snapshotter
from trainguard.sdk._world import current_world

log = logging.getLogger("trainguard.checkpoint")

FORMAT = "trainguard.checkpoint/1"
_NAME = re.compile(r"ckpt-(\d+)\.pt")
_TMP_SUFFIX = ".tmp"
#: A temporary file untouched for this long belongs to a writer that died; newer ones may still be written.
STALE_TMP_SECONDS = 3600.0

# typing's generics, not collections.abc's or tuple[...]: the alias is evaluated at import, and the SDK runs on
# Python 3.8 too (delivered into stock images, see trainguard.bundle).
GetState = typing.Callable[[], typing.Tuple[Any, int]]  # noqa: UP006


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message names the file and what to do."""


@dataclass(frozen=True)
class Checkpoint:
    step: int
    state: Any
    path: Path


class Checkpointer:
    """Saves training state under ``directory``, keeping the ``keep`` newest checkpoints.

    ``rank0_only=False`` makes every rank write: use it when ranks hold different state (sharded optimizers),
    each with its own directory. ``reuse_memory`` keeps the CPU copy that ``save_async`` takes and writes the
    next snapshot over it: snapshots after the first allocate nothing (several times faster), for one copy of
    the state held in memory between saves (pinned memory when the state is on a GPU).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        keep: int = 3,
        *,
        rank0_only: bool = True,
        reuse_memory: bool = True,
    ) -> None:
        if keep < 1:
            raise ValueError(f"Checkpointer(keep={keep}): keep must be at least 1")
        self.directory = Path(directory)
        self.keep = keep
        self.rank0_only = rank0_only
        self.directory.mkdir(parents=True, exist_ok=True)
        self._snapshotter = Snapshotter(reuse_memory)
        self._lock = threading.RLock()  # reentrant: the SIGTERM handler may interrupt a save in this thread
        self._thread: threading.Thread | None = None
        self._error: tuple[Path, BaseException] | None = None
        self._defer_depth = 0
        self._pending_signal: tuple[int, FrameType | None] | None = None
        self._terminating = False
        self._sigterm_handler: Callable[[int, FrameType | None], None] | None = None
        if self.is_writer():
            self._remove_stale_temporaries()

    # -- reading ------------------------------------------------------------------------------------------

    def path_for(self, step: int) -> Path:
        return self.directory / f"ckpt-{step:012d}.pt"

    def checkpoints(self) -> list[tuple[int, Path]]:
        """Complete checkpoint files as ``(step, path)``, oldest first (their contents are not checked)."""
        found = []
        for entry in os.scandir(self.directory):
            match = _NAME.fullmatch(entry.name)
            if match and entry.is_file():
                found.append((int(match.group(1)), Path(entry.path)))
        return sorted(found)

    def load_latest(
        self, *, map_location: Any = "cpu", weights_only: bool = True, verify: bool = True
    ) -> Checkpoint | None:
        """The newest checkpoint that loads, or ``None`` when there is none.

        A damaged file (truncated, garbage, or, with ``verify``, bytes that fail the CRC-32 checksums of its zip
        records, which torch.load itself does not check) is skipped for the previous one, and the writer
        renames it to ``*.corrupt`` so that it stops shadowing good ones. ``verify`` costs one extra read of
        the file. ``weights_only`` is passed to ``torch.load``; set it to False only for files you trust, when
        the state holds arbitrary objects.
        """
        for step, path in reversed(self.checkpoints()):
            try:
                payload = _read(path, map_location, weights_only, verify)
            except OSError as exc:  # unreadable now (gone, I/O error), not proven damaged: leave it alone
                log.warning("skipping checkpoint %s: %s", path, exc)
                continue
            except _Damaged as exc:
                log.warning("skipping damaged checkpoint %s: %s", path, exc)
                self._quarantine(path)
                continue
            if not (
                isinstance(payload, dict) and payload.get("format") == FORMAT and payload.get("step") == step
            ):
                log.warning("skipping %s: not a trainguard checkpoint of step %d", path, step)
                continue
            return Checkpoint(step=step, state=payload["state"], path=path)
        return None

    # -- writing ------------------------------------------------------------------------------------------

    def is_writer(self) -> bool:
        return not self.rank0_only or current_world().rank == 0

    def save(self, state: Any, step: int) -> Path | None:
        """Write ``state`` as the checkpoint of ``step`` and return its path (``None`` on ranks that do not write)."""
        step = _check_step(step)
        if not self.is_writer():
            return None
        return self._write(state, step)

    def save_async(self, state: Any, step: int) -> Path | None:
        """Snapshot ``state`` to CPU memory now, write it in a background thread, and return its future path.

        The caller blocks for the snapshot only, unless the previous background write is still running: at
        most one write is in flight, so a save waits for the one before. A failure of the background write is
        raised (as ``CheckpointError``) by the next ``save_async`` or ``wait``.
        """
        step = _check_step(step)
        self.wait()
        if not self.is_writer():
            return None
        frozen = self._snapshotter.take(state)
        thread = threading.Thread(
            target=self._write_in_background,
            args=(frozen, step),
            name=f"trainguard-checkpoint-{step}",
            daemon=False,  # a script that ends right after save_async still gets its checkpoint
        )
        self._thread = thread
        thread.start()
        return self.path_for(step)

    @property
    def writing(self) -> bool:
        """A background write is in flight (a ``save_async`` now would wait for it)."""
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        """Block until the background write (if any) is done; raise ``CheckpointError`` if it failed."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None:
            path, exc = error
            raise CheckpointError(f"writing checkpoint {path} failed: {type(exc).__name__}: {exc}") from exc

    def _write_in_background(self, state: Any, step: int) -> None:
        try:
            self._write(self._snapshotter.settle(state), step)
        except BaseException as exc:
            self._error = (self.path_for(step), exc)

    def _write(self, state: Any, step: int) -> Path:
        import torch

        final = self.path_for(step)
        tmp = self.directory / f".{final.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}{_TMP_SUFFIX}"
        try:
            with open(tmp, "wb") as file:
                torch.save({"format": FORMAT, "step": step, "state": state}, file)
                file.flush()
                os.fsync(file.fileno())
            with self._lock:
                os.replace(tmp, final)
                _fsync_directory(self.directory)
                self._prune()
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return final

    def _prune(self) -> None:
        complete = self.checkpoints()
        for _, path in complete[: max(0, len(complete) - self.keep)]:
            path.unlink(missing_ok=True)

    def _quarantine(self, path: Path) -> None:
        if not self.is_writer():
            return
        with contextlib.suppress(OSError):
            os.replace(path, path.with_name(path.name + ".corrupt"))

    def _remove_stale_temporaries(self) -> None:
        cutoff = time.time() - STALE_TMP_SECONDS
        for entry in os.scandir(self.directory):
            if entry.name.startswith(".ckpt-") and entry.name.endswith(_TMP_SUFFIX):
                with contextlib.suppress(OSError):
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)

    # -- SIGTERM ------------------------------------------------------------------------------------------

    def save_on_sigterm(self, get_state: GetState) -> None:
        """On SIGTERM, save ``get_state()`` (a ``(state, step)`` pair) synchronously, then end the process.

        Afterwards the previous SIGTERM handler decides: a Python handler is called (chained); the default
        disposition becomes ``exit(143)`` (128 + SIGTERM, as a shell reports a SIGTERM death), which runs
        ``finally`` blocks and lets a background write finish; a previously ignored SIGTERM stays ignored.
        Call it from the main thread. The handler runs when the main thread next executes Python code, so a
        rank blocked inside a collective whose peer died cannot save: keep regular (async) checkpoints too.
        """
        self.on_sigterm(get_state, self._save_for_sigterm)

    def on_sigterm(self, get_state: GetState, save: Callable[[Any, int], Any]) -> None:
        """``save_on_sigterm`` with another way to save (``trainguard.Snapshots`` saves into memory)."""
        previous = signal.getsignal(signal.SIGTERM)

        def handler(signum: int, frame: FrameType | None) -> None:
            if self._defer_depth > 0:
                self._pending_signal = (signum, frame)
                return
            self._terminate(get_state, save, previous, signum, frame)

        try:
            signal.signal(signal.SIGTERM, handler)
        except ValueError as exc:
            raise CheckpointError(f"save_on_sigterm must be called from the main thread: {exc}") from None
        self._sigterm_handler = handler

    @contextlib.contextmanager
    def defer_sigterm(self) -> Iterator[None]:
        """Hold a SIGTERM that arrives inside the block until its end, so its save sees a whole step."""
        self._defer_depth += 1
        try:
            yield
        finally:
            self._defer_depth -= 1
            pending, self._pending_signal = self._pending_signal, None
            if self._defer_depth == 0 and pending is not None and self._sigterm_handler is not None:
                self._sigterm_handler(*pending)

    def _save_for_sigterm(self, state: Any, step: int) -> None:
        if self.is_writer():
            started = time.monotonic()
            path = self.save(state, step)
            log.warning("SIGTERM: saved %s in %.2f s", path, time.monotonic() - started)

    def _terminate(
        self,
        get_state: GetState,
        save: Callable[[Any, int], Any],
        previous: Any,
        signum: int,
        frame: FrameType | None,
    ) -> None:
        if self._terminating:  # a second SIGTERM while saving: the first one finishes the job
            return
        self._terminating = True
        try:
            save(*get_state())
        except Exception:
            log.exception("SIGTERM: saving the checkpoint failed")
        if callable(previous):
            try:
                previous(signum, frame)
            finally:
                self._terminating = False  # the chained handler chose to carry on (or raised): allow another
            return
        if previous == signal.SIG_IGN:
            self._terminating = False
            return
        raise SystemExit(128 + signum)


class _Damaged(Exception):
    pass


def _read(path: Path, map_location: Any, weights_only: bool, verify: bool) -> Any:
    """The payload of a checkpoint file; ``_Damaged`` when its bytes are not what torch.save wrote."""
    import torch

    try:
        with zipfile.ZipFile(path) as archive:  # torch.save writes a zip archive: anything else is damage
            bad_record = archive.testzip() if verify else None
    except (zipfile.BadZipFile, EOFError) as exc:
        raise _Damaged(f"not a complete torch zip archive ({exc})") from exc
    if bad_record is not None:
        raise _Damaged(f"record {bad_record} fails its CRC-32 checksum")
    try:
        return torch.load(path, map_location=map_location, weights_only=weights_only)
    except OSError:
        raise
    except Exception as exc:
        if weights_only and "Weights only load failed" in str(exc):
            raise CheckpointError(
                f"{path}: the state holds objects that torch.load(weights_only=True) refuses; pass "
                "load_latest(weights_only=False) if you trust this directory, or keep only tensors, "
                "numbers, strings and containers in the state"
            ) from exc
        raise _Damaged(f"{type(exc).__name__}: {exc}") from exc


def _check_step(step: int) -> int:
    try:
        value = operator.index(step)  # ints, NumPy integers, integer 0-d tensors
    except TypeError:
        value = -1
    if isinstance(step, bool) or value < 0:
        raise ValueError(f"checkpoint step must be a non-negative integer, got {step!r}")
    return value


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
