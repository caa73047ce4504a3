"""The operator's malloc arenas capped (``trainguard.backends.k8s.arenas``), seen in a process of the test's own:
threads that each allocate, then glibc's own count of its arenas (``malloc_stats``, one "Arena N:" each)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's arenas"
)

THREADS = 8

PROGRAM = f"""
import ctypes, sys, threading
from trainguard.backends.k8s import arenas
print(arenas.cap() if sys.argv[1] == "cap" else "left as glibc makes them", flush=True)
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
started, hold = threading.Barrier({THREADS} + 1), threading.Event()

def allocate():
    libc.malloc(4096)  # glibc's malloc: the thread's arena is chosen at its first allocation
    started.wait()
    hold.wait()

threads = [threading.Thread(target=allocate) for _ in range({THREADS})]
for thread in threads:
    thread.start()
started.wait()  # every thread holds its arena while malloc_stats counts them
libc.malloc_stats()
hold.set()
"""


def arenas_of(mode: str, **env: str) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=True,
    )
    return done.stdout.strip(), len(re.findall(r"^Arena \d+:", done.stderr, re.MULTILINE))


def test_uncapped_each_thread_takes_an_arena_of_its_own() -> None:
    _, count = arenas_of("leave")
    assert count > 2


def test_capped_the_threads_share_two_arenas() -> None:
    words, count = arenas_of("cap")
    assert words == "at most 2 (MALLOC_ARENA_MAX overrides)"
    assert count <= 2


def test_malloc_arena_max_in_the_environment_wins() -> None:
    words, count = arenas_of("cap", MALLOC_ARENA_MAX="4")
    assert words == "MALLOC_ARENA_MAX=4, from the environment"
    assert count == 4
