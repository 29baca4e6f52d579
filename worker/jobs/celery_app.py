"""The Celery app: delivery guarantees, time limits, queues, and per-task log binding.

Celery + Redis delivers at least once, with holes (a lost worker's message waits for the
visibility timeout, a Redis restart can drop the queue). The database makes it exactly-once:
claims are fenced by attempt numbers and the sweep republishes what the broker lost. The
settings below keep Celery's side of that bargain.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import structlog
from celery import Celery, signals
from kombu.utils.scheduling import round_robin_cycle

from worker.jobs import celery_logs  # noqa: F401  (connects Celery's logging signals)
from worker.platform.settings import get_settings
from worker.store import db

RETRIEVE_TASK = "evidence.retrieve"
#: The batch lane's message: "run the next batch retrieval" (the claim picks which; no args).
RETRIEVE_NEXT_TASK = "evidence.retrieve_next"
SWEEP_TASK = "evidence.sweep"
DELIVER_WEBHOOK_TASK = "evidence.webhook.deliver"
WEBHOOK_SWEEP_TASK = "evidence.webhook.sweep"
WATCH_TICK_TASK = "evidence.watch.tick"
#: The interactive lane keeps the historical queue name, so a worker started with
#: `--queues retrievals` and messages published before the upgrade still meet.
INTERACTIVE_QUEUE = "retrievals"
BATCH_QUEUE = "retrievals-batch"
RETRIEVE_QUEUE = INTERACTIVE_QUEUE
SWEEP_QUEUE = "sweep"
WEBHOOK_QUEUE = "webhooks"
#: Queue of each lane (`worker.store.models.LANES`).
LANE_QUEUES = {"interactive": INTERACTIVE_QUEUE, "batch": BATCH_QUEUE}
#: The order a worker takes messages in when several of its queues hold some: the sweep (rare
#: and cheap, and it must not starve behind a backlog), then interactive, then webhooks (short,
#: bounded sends, and never more than EVIDENCE_WEBHOOK_MAX_IN_FLIGHT messages at once, so they
#: cannot starve the batch lane: `worker.webhooks.dispatch`), then batch.
QUEUE_PRIORITY = (SWEEP_QUEUE, INTERACTIVE_QUEUE, WEBHOOK_QUEUE, BATCH_QUEUE)
#: What `evidence worker` consumes by default, and the retrieval workers of the Procfile.
RETRIEVAL_QUEUES = f"{INTERACTIVE_QUEUE},{BATCH_QUEUE}"
WORKER_QUEUES = f"{RETRIEVAL_QUEUES},{WEBHOOK_QUEUE},{SWEEP_QUEUE}"
#: Redis re-delivers an unacked message after this; every task ends long before it.
VISIBILITY_TIMEOUT_SECONDS = 3600
#: The broker transport: kombu's Redis one, with a client shared by each channel's commands.
REDIS_TRANSPORT = "worker.jobs.redis_transport:Transport"
#: How long a publish may wait on the broker before the outbox leaves the row to the sweep.
PUBLISH_CONNECT_TIMEOUT_SECONDS = 2.0


class LaneOrder(round_robin_cycle):  # type: ignore[misc]  # kombu ships no types
    """kombu's Redis queue order for a worker: `QUEUE_PRIORITY` first, in that order, always.

    kombu asks Redis with one `BRPOP q1 q2 …`, which pops from the first non-empty key. Its
    default strategy rotates the last served queue to the end (so interactive and batch would
    alternate), and its `priority` strategy keeps the order of a Python set, i.e. an arbitrary
    one per process. This order is fixed: an interactive message is taken before any batch one.
    """

    def update(self, it: Iterable[str]) -> None:
        rank = {name: index for index, name in enumerate(QUEUE_PRIORITY)}
        self.items[:] = sorted(it, key=lambda name: (rank.get(name, len(rank)), name))

    def rotate(self, last_used: str) -> None:
        """Never rotate: the order is the priority."""


def make_celery() -> Celery:
    """Build the app from the current settings."""
    settings = get_settings()
    app = Celery(
        "evidence",
        broker=settings.broker_url,
        include=["worker.jobs.tasks", "worker.jobs.webhook_tasks", "worker.jobs.watch_tasks"],
        events="worker.jobs.task_events:LockedBufferEvents",
    )
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        broker_connection_retry_on_startup=True,
        # kombu's Redis transport, sharing one client per channel (`redis_transport`).
        broker_transport=REDIS_TRANSPORT,
        broker_transport_options={
            "visibility_timeout": VISIBILITY_TIMEOUT_SECONDS,
            "socket_connect_timeout": PUBLISH_CONNECT_TIMEOUT_SECONDS,
            "socket_timeout": 10,
            "retry_on_timeout": True,
            "health_check_interval": 10,
            "queue_order_strategy": f"{__name__}:LaneOrder",
        },
        broker_pool_limit=10,
        result_backend=None,
        # One (disabled) backend object for the whole process: by default Celery builds one per
        # thread on its first task, looking its class up among every installed package's entry
        # points (tens of ms), which a threads-pool worker paid once for each of its threads.
        result_backend_thread_safe=True,
        task_ignore_result=True,
        task_soft_time_limit=settings.soft_time_limit,
        task_time_limit=settings.hard_time_limit,
        task_default_queue=RETRIEVE_QUEUE,
        task_routes={
            RETRIEVE_TASK: {"queue": INTERACTIVE_QUEUE},
            RETRIEVE_NEXT_TASK: {"queue": BATCH_QUEUE},
            SWEEP_TASK: {"queue": SWEEP_QUEUE},
            DELIVER_WEBHOOK_TASK: {"queue": WEBHOOK_QUEUE},
            WEBHOOK_SWEEP_TASK: {"queue": SWEEP_QUEUE},
            WATCH_TICK_TASK: {"queue": SWEEP_QUEUE},
        },
        task_serializer="json",
        accept_content=["json"],
        # Flower learns of tasks from the workers' events; a "sent" event per POST would cost
        # the API an extra broker round trip.
        task_send_sent_event=False,
        worker_send_task_events=True,
        worker_hijack_root_logger=False,
        # Beat on several hosts, one sending: the holder of a lock in Redis (`beat_lock`).
        beat_scheduler="worker.jobs.beat_lock:LockedScheduler",
        beat_max_loop_interval=settings.beat_poll_seconds,
        redbeat_redis_url=settings.politeness_redis_url,
        redbeat_redis_options={
            "socket_connect_timeout": PUBLISH_CONNECT_TIMEOUT_SECONDS,
            "socket_timeout": settings.beat_poll_seconds,
        },
        redbeat_key_prefix="evidence:beat:",
        redbeat_lock_key="evidence:beat::lock",
        redbeat_lock_timeout=settings.beat_lock_timeout_seconds,
        beat_schedule={
            "sweep": {
                "task": SWEEP_TASK,
                "schedule": settings.sweep_interval_seconds,
                # A sweep nobody ran in time is worthless: never let them pile up.
                "options": {"expires": max(settings.sweep_interval_seconds * 2, 2.0)},
            },
            "webhook-sweep": {
                "task": WEBHOOK_SWEEP_TASK,
                "schedule": settings.sweep_interval_seconds,
                "options": {"expires": max(settings.sweep_interval_seconds * 2, 2.0)},
            },
            # Watches' runs: a tick late or lost is harmless (the next takes what is due).
            "watch-tick": {
                "task": WATCH_TICK_TASK,
                "schedule": settings.watch_tick_seconds,
                "options": {"expires": max(settings.watch_tick_seconds * 2, 2.0)},
            },
        },
    )
    return app


app = make_celery()


@signals.task_prerun.connect
def _bind_task_context(task_id: str, task: Any, args: tuple[Any, ...], **_: Any) -> None:
    structlog.contextvars.bind_contextvars(task_id=task_id, task_name=task.name)
    if task.name == RETRIEVE_TASK and args:
        structlog.contextvars.bind_contextvars(retrieval_id=str(args[0]))


@signals.task_postrun.connect
def _clear_task_context(**_: Any) -> None:
    """Clear so nothing leaks into the next task on this worker."""
    structlog.contextvars.clear_contextvars()


@signals.worker_init.connect
def _preload_pipeline(**_: Any) -> None:
    """Import the content pipeline (trafilatura and what it pulls in) before the pool forks.

    A task cancelled mid-import (as on a broker disconnect) would leave a half-initialised
    module in its child; here nothing can interrupt it (docs/reliability.md, "Outages").
    """
    import worker.retrieval.pipeline  # noqa: F401


@signals.worker_shutdown.connect
def _stop_extract_pool(**_: Any) -> None:
    """A threads-pool worker's extraction processes end with it (prefork has none)."""

    # Imported here: the API imports this module (to publish), and needs no worker machinery.
    from worker.retrieval import extract_pool

    extract_pool.stop()


@signals.worker_process_init.connect
def _after_fork(**_: Any) -> None:
    """A forked child must not share the parent's database connections or HTTP pool."""

    # Imported here: the API imports this module (to publish), and needs no fetcher.
    from worker.fetch import shared

    db.skip_pre_ping()  # also forgets the parent's engine
    shared.reset_fetcher()


@signals.worker_process_shutdown.connect
def _before_child_exit(**_: Any) -> None:
    """A pool child ends with os._exit, which closes nothing: close its fetcher first."""

    # Imported here: the API imports this module (to publish), and needs no fetcher.
    from worker.fetch import shared

    shared.close_fetcher()
