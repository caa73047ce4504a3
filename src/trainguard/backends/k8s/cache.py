"""A watched copy of one kind of object: list once (in pages), then watch from that version, and list again when
the watch falls too far behind (410 Gone). Every change calls ``on_change`` with the object, which is how the
operator learns which job to reconcile; readers take consistent snapshots under a lock. A cache given
``fields`` keeps only those of each object (``fields.project``), as it arrives: what it hands out, to readers
and to ``on_change``, is that projection.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.fields import Fields, project

Obj = dict[str, Any]
log = logging.getLogger(__name__)

#: Seconds between attempts when the API server cannot be reached.
RETRY_SECONDS = 1.0
#: Objects per page of a list: thousands of pods are never one answer (its text and its dicts) in memory at once.
LIST_PAGE = 500


def key_of(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Cache:
    def __init__(
        self,
        kube: Kube,
        path: str,
        on_change: Callable[[Obj, Obj | None], None],
        label_selector: str | None = None,
        index_label: str | None = None,
        fields: Fields | None = None,
    ) -> None:
        self.kube = kube
        self.path = path
        self.label_selector = label_selector
        self.on_change = on_change
        #: What is kept of each object (None: all of it).
        self.fields = fields
        self._objects: dict[tuple[str, str], Obj] = {}
        #: (namespace, value of ``index_label``) -> the objects that carry it, so that ``select`` by that
        #: label reads a handful of objects rather than all of them (thousands of pods, every reconcile).
        self.index_label = index_label
        self._index: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}
        self._lock = threading.Lock()
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch {path}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    # ---- reading ----------------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._objects.get((namespace, name))

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._objects.values())

    def select(self, namespace: str, labels: dict[str, str]) -> list[Obj]:
        with self._lock:
            if self.index_label is not None and self.index_label in labels:
                candidates = list(self._index.get((namespace, labels[self.index_label]), {}).values())
            else:
                candidates = [obj for (ns, _), obj in self._objects.items() if ns == namespace]
        return [
            obj
            for obj in candidates
            if all(((obj["metadata"].get("labels") or {}).get(k)) == v for k, v in labels.items())
        ]

    def put(self, obj: Obj) -> None:
        """What a write returned: newer than the cache may be yet (the watch catches up)."""
        obj = self._keep(obj)
        with self._lock:
            old = self._objects.get(key_of(obj))
            if old is None or _version(old) <= _version(obj):
                self._store(obj)

    def _keep(self, obj: Obj) -> Obj:
        return obj if self.fields is None else project(obj, self.fields)

    # ---- the maps (under the lock) ----------------------------------------------------------------

    def _index_key(self, obj: Obj) -> tuple[str, str] | None:
        if self.index_label is None:
            return None
        value = (obj["metadata"].get("labels") or {}).get(self.index_label)
        return None if value is None else (key_of(obj)[0], str(value))

    def _store(self, obj: Obj) -> None:
        key = key_of(obj)
        old = self._objects.get(key)
        if old is not None:
            self._unindex(old)
        self._objects[key] = obj
        index = self._index_key(obj)
        if index is not None:
            self._index.setdefault(index, {})[key] = obj

    def _drop(self, obj: Obj) -> None:
        old = self._objects.pop(key_of(obj), None)
        if old is not None:
            self._unindex(old)

    def _unindex(self, obj: Obj) -> None:
        index = self._index_key(obj)
        members = self._index.get(index) if index is not None else None
        if index is not None and members is not None:
            members.pop(key_of(obj), None)
            if not members:
                del self._index[index]

    # ---- the watch --------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._list()
                self.synced.set()
                while not self._stop.is_set():
                    version = self._watch(version)
            except ApiError as error:
                if (
                    error.status == 404
                ):  # the resource is not served (its CRD is not installed): nothing to see
                    self.synced.set()
                    self._stop.wait(RETRY_SECONDS * 5)
                elif error.status != 410:
                    log.warning("watch of %s: %s", self.path, error)
                    self._stop.wait(RETRY_SECONDS)
            except Exception as error:  # the connection broke: list again after a pause
                log.warning("watch of %s: %s", self.path, error)
                self._stop.wait(RETRY_SECONDS)

    def _query(self) -> dict[str, Any]:
        return {"labelSelector": self.label_selector} if self.label_selector else {}

    def _list(self) -> str:
        fresh: dict[tuple[str, str], Obj] = {}
        version = ""
        for page in self.kube.list_pages(self.path, LIST_PAGE, **self._query()):
            for item in page.get("items") or []:
                obj = self._keep(item)
                fresh[key_of(obj)] = obj
            version = str(page["metadata"]["resourceVersion"])
        with self._lock:
            gone = [obj for key, obj in self._objects.items() if key not in fresh]
            previous = dict(self._objects)
            self._objects, self._index = {}, {}
            for obj in fresh.values():
                self._store(obj)
        for obj in gone:
            self.on_change(obj, None)
        for key, obj in fresh.items():
            if previous.get(key, {}).get("metadata", {}).get("resourceVersion") != _rv(obj):
                self.on_change(obj, obj)
        return version

    def _watch(self, version: str) -> str:
        for event in self.kube.watch(self.path, version, self._query()):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                raise ApiError(int(obj.get("code") or 0), str(obj.get("message")))
            version = _rv(obj) or version
            if kind == "BOOKMARK":
                continue
            obj = self._keep(obj)
            with self._lock:
                if kind == "DELETED":
                    self._drop(obj)
                else:
                    self._store(obj)
            self.on_change(obj, None if kind == "DELETED" else obj)
            if self._stop.is_set():
                break
        return version


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _version(obj: Obj) -> int:
    try:
        return int(_rv(obj))
    except ValueError:
        return 0
