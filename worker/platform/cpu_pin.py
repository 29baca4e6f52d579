"""One CPU for a process of many threads: they hand the interpreter lock over there.

The process's threads take turns holding the GIL and hand it over at every blocking call (a
socket read, a Redis or PostgreSQL round trip). Spread over every CPU, each hand-over wakes
the next thread on another CPU: a futex wake-up, an inter-processor interrupt and a cold
cache, for a few microseconds of Python, and the kernel's part of that grew to a large share
of the worker's CPU. Within one CPU the same hand-overs are cheap switches between threads of
one core, and little is lost: only one thread runs Python at a time anyway. The extraction
processes, where the CPU-heavy work is, keep every CPU the worker was allowed (`release`).
The API's processes are pinned the same way, each to a CPU of its own while there are CPUs
to go round (`claim`). Measurements: docs/execution-model.md, "One CPU per process".
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO, Literal

#: `EVIDENCE_WORKER_CPU`: which CPU, or none.
CpuSetting = Literal["auto", "none"] | int
#: Processes that may share one CPU before `claim` gives up (far more than anyone runs).
MAX_PER_CPU = 64
#: The lock `claim` holds for this process's life (closed, it frees the CPU for another).
_claimed: IO[str] | None = None


def choose(setting: CpuSetting, allowed: set[int], pid: int) -> int | None:
    """The CPU a worker process with `pid`, allowed `allowed`, should keep to; None to stay
    unpinned.

    `auto` pins only where there is a choice (two CPUs or more), to one of the allowed CPUs
    picked by the pid, so that several workers on one machine spread over its CPUs (start each
    under `taskset` to place them exactly: `auto` keeps within what it is allowed). A number
    pins to that CPU; None when the process may not use it.
    """
    if setting == "none" or not allowed:
        return None
    if setting == "auto":
        if len(allowed) < 2:
            return None
        cpus = sorted(allowed)
        return cpus[pid % len(cpus)]
    return setting if setting in allowed else None


def pin(cpu: int) -> None:
    """Keep every thread of this process (and those it starts later) on `cpu`."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except ProcessLookupError:  # the thread ended meanwhile
            continue


def release(allowed: set[int]) -> None:
    """Let this process (an extraction process, started from a pinned one) use `allowed`."""
    if allowed and os.sched_getaffinity(0) != allowed:
        os.sched_setaffinity(0, allowed)


def claim(directory: Path, allowed: set[int]) -> int | None:
    """A CPU for this process that as few of its siblings (processes claiming in `directory`)
    hold as possible: the first CPU none holds, else the first held once, and so on.

    Each claim is an exclusive `flock` held until the process ends, so a replacement of a dead
    sibling takes back the CPU it left. None when nothing could be claimed.
    """
    global _claimed
    for sharers in range(MAX_PER_CPU):
        for cpu in sorted(allowed):
            handle = (directory / f"cpu-{cpu}-{sharers}.lock").open("a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            if _claimed is not None:
                _claimed.close()
            _claimed = handle
            return cpu
    return None
