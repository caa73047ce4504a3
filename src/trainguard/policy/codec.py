"""Saving and reading the policy state of a big job on every reconcile without redoing every pod's entry.

``PolicyState.to_dict``/``from_dict`` write and read one entry per pod. A job of 16,384 GPUs has thousands of
pods and changes the counters of a few per reconcile, so a ``StateCodec`` remembers the entries:

- written: by the identity of the (frozen) ref and counters objects they were written from, so an
  unchanged pod's entry is the one written before;
- read: by the identity of the entry, with a copy of its content to compare against, so an entry read before
  is not parsed again, and one changed in place since (nothing should, but a dict can be) is;
- counters just read are written as the entry ``to_dict`` would write for them, and that entry reads back as
  the same objects (reading normalises the types, so reading what it writes changes nothing): once a pod's
  counters stop changing, its entry is neither written nor parsed again.

Either way the result is what ``to_dict``/``from_dict`` give, value for value; ``StateCodec`` only skips work.
Entries written are shared between the dicts returned: a caller must treat them as read-only (a status
does).

One codec serves one job (``SettledSlots.codec_of``), and remembers only what its latest read and write used: a
read keeps the entries it read (and the written entries of their counters), a write the entries it wrote, and
everything older is let go. Its memory is that of the job's current entries, twice at most, however many
versions of the status came and went (a table that filled up to a fixed bound held every pod of every version
it had seen: thousands of entries for a few hundred pods).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

from trainguard.policy.types import (
    REF_ORDER,
    PodCounters,
    PodRef,
    PolicyState,
    pod_entry_from_dict,
    pod_entry_to_dict,
)

_FIRST = itemgetter(0)
_Written = tuple[PodRef, PodCounters, dict[str, Any], dict[str, Any]]
_Read = tuple[Mapping[str, Any], dict[str, Any], tuple[PodRef, PodCounters]]


class StateCodec:
    def __init__(self) -> None:
        #: id(counters) -> (ref, counters, the entry written, a copy of it)
        self._written: dict[int, _Written] = {}
        #: id(entry) -> (entry, a copy of it, what it reads as)
        self._read: dict[int, _Read] = {}

    def to_dict(self, state: PolicyState) -> dict[str, Any]:
        return state.to_dict(self._write_pods)

    def from_dict(self, data: Mapping[str, Any]) -> PolicyState:
        return PolicyState.from_dict(data, self._read_pods)

    def _write_pods(self, pods: Mapping[PodRef, PodCounters]) -> list[dict[str, Any]]:
        known_before = self._written
        written: dict[int, _Written] = {}
        self._written = written
        entries = []
        # Sorted by (role, index) alone (unique in a mapping), so neither a PodRef is hashed to look its
        # counters up nor two compared.
        for _, (ref, counters) in sorted(zip(map(REF_ORDER, pods), pods.items(), strict=True), key=_FIRST):
            known = known_before.get(id(counters))
            if known is not None and known[0] is ref and known[1] is counters and known[2] == known[3]:
                written[id(counters)] = known
                entries.append(known[2])
            else:
                entries.append(self._write(ref, counters))
        return entries

    def _read_pods(self, entries: Iterable[Mapping[str, Any]]) -> dict[PodRef, PodCounters]:
        known_before, written_before = self._read, self._written
        read: dict[int, _Read] = {}
        self._read, self._written = read, {}
        pods = {}
        for entry in entries:
            known = known_before.get(id(entry))
            if known is not None and known[0] is entry and known[1] == entry:
                read[id(entry)] = known
                ref, counters = known[2]
                was_written = written_before.get(id(counters))
                if was_written is not None:
                    self._written[id(counters)] = was_written
            else:
                ref, counters = self._parse(entry)
            pods[ref] = counters
        return pods

    def _write(self, ref: PodRef, counters: PodCounters) -> dict[str, Any]:
        entry = pod_entry_to_dict(ref, counters)
        self._written[id(counters)] = (ref, counters, entry, dict(entry))
        return entry

    def _parse(self, entry: Mapping[str, Any]) -> tuple[PodRef, PodCounters]:
        parsed = ref, counters = pod_entry_from_dict(entry)
        if isinstance(entry, dict):
            self._read[id(entry)] = (entry, dict(entry), parsed)
        # The entry these counters will be written as, known at once; and since what was parsed has the
        # types an entry is read into, that entry reads back as the very same objects (nothing to parse).
        written = pod_entry_to_dict(ref, counters)
        self._written[id(counters)] = (ref, counters, written, dict(written))
        self._read[id(written)] = (written, dict(written), parsed)
        return parsed
