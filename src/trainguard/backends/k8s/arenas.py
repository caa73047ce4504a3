"""The operator's malloc arenas, capped.

glibc's malloc gives each thread that allocates an arena of its own, up to eight per core, and memory freed in
one arena serves only that arena's later allocations. The operator's threads (its reconcile workers, the apply
threads that send a job's pods side by side, the watches, the Events' sender) each allocate in turn: with an arena
each, every one of them keeps its own free memory, and the process's resident memory is their sum. Two arenas
hold about what one does and let two threads allocate at once (Python's own objects come from its allocator, which
holds the interpreter's lock anyway): at 100 kwok nodes and 400 pods the operator's peak memory went down by 1-3.5
MiB and its CPU time by about a sixth (docs/operator.md, "Two rounds at a tenth of full size").

It is what ``MALLOC_ARENA_MAX`` does, set from the process itself (``mallopt``), before its threads start; a
``MALLOC_ARENA_MAX`` in the environment is the user's and wins. A C library other than glibc (musl's has no
arenas) is left as it is.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

#: mallopt's parameter for the most arenas (glibc's malloc.h).
M_ARENA_MAX = -8
#: The operator's arenas.
ARENAS = 2


def cap(arenas: int = ARENAS, environ: Mapping[str, str] = os.environ) -> str:
    """Caps this process's malloc arenas at ``arenas`` (call it before any thread starts); what was done, in
    words for the operator's log."""
    given = environ.get("MALLOC_ARENA_MAX")
    if given:
        return f"MALLOC_ARENA_MAX={given}, from the environment"
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no glibc: its arenas are not there to cap
        return "as the C library makes them (no glibc)"
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(M_ARENA_MAX, arenas) != 1:
        return "as glibc makes them (mallopt refused the cap)"
    return f"at most {arenas} (MALLOC_ARENA_MAX overrides)"
