"""Start a threads-pool worker process: many retrievals in flight, extraction in processes.

`evidence worker` runs this in a child it supervises (`worker.jobs.supervisor`). Celery's
threads pool delivers the messages (acks late, one thread per retrieval in flight); the
extraction processes start from a fork server while Celery starts.
"""

from __future__ import annotations

import os
import threading

import structlog
from celery import signals

from worker.fetch import shared
from worker.jobs.celery_app import app
from worker.platform import cpu_pin, heap
from worker.platform.settings import get_settings
from worker.retrieval import extract_pool
from worker.store import db

log = structlog.get_logger(__name__)

#: Messages a threads-pool worker reserves, per thread.
THREADS_PREFETCH_MULTIPLIER = 2
#: The pool class a threads-pool worker runs.
LANE_POOL = "worker.jobs.lane_pool:LaneThreadPool"


def run_threads_worker(argv: list[str]) -> int:
    """Prepare this process for threads, then run `celery worker` with `argv` (no `-P`)."""

    settings = get_settings()
    db.skip_pre_ping()
    db.queue_for_connections()
    shared.reset_fetcher()
    # First, so every thread started from now on (Celery's among them) keeps to the CPU; the
    # extraction processes take back every CPU this process was allowed.
    allowed = os.sched_getaffinity(0)
    cpu = cpu_pin.choose(settings.worker_cpu, allowed, os.getpid())
    if cpu is not None:
        cpu_pin.pin(cpu)
    elif isinstance(settings.worker_cpu, int):  # named, but not a CPU this process may use
        log.warning("worker_cpu_not_allowed", cpu=settings.worker_cpu, allowed=sorted(allowed))
    extraction = extract_pool.start(
        settings.extract_process_count, settings.extract_nice, cpus=allowed
    )
    # The fork server takes seconds to start and import the pipeline: let Celery start
    # meanwhile (retrievals that arrive first queue for a process within their deadline).
    threading.Thread(target=extraction.warm, name="extract-pool-warm", daemon=True).start()
    # The result backend (disabled, and shared by every thread: `celery_app`), made now: the
    # first tasks start on hundreds of threads at once, and each would make its own.
    _ = app.backend
    # Celery cancels running tasks when the broker connection drops by killing their process;
    # a thread cannot be killed. The task finishes and settles instead (the database fences
    # it), and the broker redelivers its message, which then claims nothing.
    app.conf.worker_cancel_long_running_tasks_on_connection_loss = False
    # The threads pool consumes in a blocking loop that asks the broker again only every poll
    # (up to a second or two): with no message waiting in the process, a thread that frees
    # idles that long. Reserving twice the threads keeps the next message at hand. Reserved
    # messages are unacked: a lost worker's are redelivered, or republished by the sweep.
    app.conf.worker_prefetch_multiplier = THREADS_PREFETCH_MULTIPLIER
    # Celery's threads pool, but taking the reserved messages in lane order (`lane_pool`); the
    # CLI knows pools only by alias, and takes a configured one when given none.
    app.conf.worker_pool = LANE_POOL
    signals.worker_ready.connect(_freeze_heap, weak=False)
    app.worker_main(argv)  # ends in SystemExit with its exit code
    return 0


def _freeze_heap(**_: object) -> None:
    """Once Celery has started (its bootsteps import and build most of what it keeps)."""
    log.info("heap_frozen", objects=heap.freeze())


def preload() -> None:
    """Import what a worker process runs, once, in the supervisor: a replacement worker forked
    from it starts without importing again, and shares these pages with it."""
