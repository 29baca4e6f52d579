"""Each API process on a CPU of its own, while there are CPUs to go round.

An API process runs an event loop and a pool of threads that take turns holding the
interpreter lock; spread over every CPU, each hand-over is a wake-up on another CPU
(`worker.platform.cpu_pin` says what that costs). `evidence api` makes a directory in which the
processes it starts claim their CPUs (`EVIDENCE_API_CPU`, default `auto`): with two processes
on two CPUs, one on each.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from worker.platform import cpu_pin
from worker.platform.settings import get_settings

log = structlog.get_logger(__name__)

#: Where the processes of one `evidence api` claim their CPUs (made by the command when `wanted`).
CLAIMS_ENV = "_EVIDENCE_API_CPU_CLAIMS"


def wanted() -> bool:
    """Whether `evidence api`'s processes should claim CPUs (`auto`, and two or more)."""
    return get_settings().api_cpu == "auto" and len(os.sched_getaffinity(0)) >= 2


def take() -> int | None:
    """In each API process as it starts: claim a CPU and keep every thread on it."""
    claims = os.environ.get(CLAIMS_ENV)
    if not claims:
        return None
    try:
        cpu = cpu_pin.claim(Path(claims), os.sched_getaffinity(0))
        if cpu is not None:
            cpu_pin.pin(cpu)
    except OSError as exc:  # the directory went away: serve unpinned
        log.warning("api_cpu_claim_failed", error=type(exc).__name__)
        return None
    return cpu
