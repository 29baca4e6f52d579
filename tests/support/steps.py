"""Steps the extraction-pool tests run in its processes (importable there by name)."""

from __future__ import annotations

import os
import signal
import time


def pid() -> int:
    return os.getpid()


def hang() -> None:
    """An extraction that never ends on its own."""
    time.sleep(3600)


def nap(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def crash() -> None:
    """Die as a crash in a C extension would."""
    os.kill(os.getpid(), signal.SIGKILL)


def nice() -> int:
    return os.nice(0)
