"""How much slower than a quiet reference machine this one is, measured once per test session.

Tests that wait on real processes (a worker's fetch deadline, an API answering under load)
give those waits `scaled(seconds)`: a limit tuned on a quiet machine, stretched by the
slowdown, so a busy laptop gets the same outcomes later instead of timeouts. Tests that prove a
timeout keep their hostile peer well past the scaled limit (its duration scaled too).

The factor is `EVIDENCE_TEST_SLOWDOWN` when set (an operator who knows the machine will get
busier later in the run, e.g. `make bench` starting beside it), otherwise measured: a small
CPU-bound loop, timed by the wall clock and by the process's own CPU time. Wall over CPU is
how long this process waits for a core (contention); CPU over the reference is how slow a core
is. The session's first process sets the variable, so pytest-xdist's processes inherit one
factor instead of each measuring its own.
"""

from __future__ import annotations

import os
import statistics
import time

ENV_VAR = "EVIDENCE_TEST_SLOWDOWN"
#: CPU seconds of one `_spin()` on an idle core of the machine the limits were tuned on.
REFERENCE_CPU_SECONDS = 0.05
#: Past this the suite would take hours; a machine that slow needs the variable set by hand.
MAX_FACTOR = 8.0
ROUNDS = 5


def _spin() -> tuple[float, float]:
    """(wall, CPU) seconds of a fixed amount of pure-Python work."""
    wall, cpu = time.perf_counter(), time.process_time()
    total = 0
    for n in range(1_000_000):
        total += n * n % 7
    return time.perf_counter() - wall, time.process_time() - cpu


def measure() -> float:
    """The slowdown factor of this machine right now, from 1 to MAX_FACTOR."""
    rounds = [_spin() for _ in range(ROUNDS)]
    contention = max(1.0, statistics.median(w / max(c, 1e-6) for w, c in rounds))
    speed = max(1.0, statistics.median(c for _, c in rounds) / REFERENCE_CPU_SECONDS)
    return round(min(MAX_FACTOR, contention * speed), 2)


def factor() -> float:
    """The session's factor: the variable if set, else measured once and stored in it."""
    given = os.environ.get(ENV_VAR)
    if given:
        return min(MAX_FACTOR, max(1.0, float(given)))
    found = measure()
    os.environ[ENV_VAR] = str(found)
    return found


def scaled(seconds: float) -> float:
    """`seconds` on the reference machine, as long as it takes here."""
    return seconds * factor()
