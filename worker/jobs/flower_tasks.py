"""Every batch retrieval a worker runs, listed in Flower as a task with its retrieval id.

A batch-lane message (`evidence.retrieve_next`) carries no argument: the claim picks the
retrieval. And most batch retrievals run without a message of their own: a task thread takes
further tokens itself (`spare_tokens`: follow-ons, and fanned-out runs on idle threads), which
Celery never hears of. Flower learns of tasks only from the workers' task events, so this
module sends them:

* the first retrieval a delivered message claims is named on that message's own row by a late
  `task-sent` event carrying `args`: Celery's event state (what Flower keeps) merges a state
  that logically came before the current one without changing the current one, and `sent`
  (PENDING) comes before every other, so the row keeps its STARTED or SUCCESS (a second
  `task-received` would merge as well, but Flower would count the message as prefetched
  again, for ever);
* every other claim is a task of its own, under a fresh task id: `task-received`,
  `task-started`, then `task-succeeded` with its outcome as result (or `task-failed`), sent
  through the worker's own dispatcher, as Celery sends a delivered task's.

Each row's args are `['<retrieval id>']`, as for `evidence.retrieve`. A threads-pool worker's
(the default) task threads share its consumer's dispatcher; a prefork child has none (its
parent sends the events), so there a batch row keeps no args (and runs no follow-ons).
"""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any

import structlog
from celery import signals
from celery.utils.saferepr import saferepr

from worker.jobs.celery_app import RETRIEVE_NEXT_TASK, app

log = structlog.get_logger(__name__)

#: The columns of Flower's task list (`evidence flower`): the retrieval id (args) and how it
#: ended (result) read without opening a task.
TASKS_COLUMNS = "name,uuid,state,args,result,received,runtime,worker"
#: What Celery trims a task's result to in its events (`Task.resultrepr_maxsize`).
RESULT_REPR_MAXSIZE = 1024

#: The worker's consumer, which holds its event dispatcher (replaced when the broker
#: connection is made again): None outside a worker, where nothing is sent.
_consumer: Any = None
#: The delivered task whose row this thread already named (a thread runs one task at a time).
_named = threading.local()


def _remember_consumer(sender: Any = None, **_: Any) -> None:
    """Every delivered message passes the consumer: follow-ons only come after one."""
    global _consumer
    _consumer = sender


signals.task_received.connect(_remember_consumer)


def _dispatcher() -> Any:
    consumer = _consumer
    dispatcher = getattr(consumer, "event_dispatcher", None)
    return dispatcher if dispatcher is not None and dispatcher.enabled else None


def args_repr(retrieval_id: uuid.UUID | str) -> str:
    """A row's args as Celery shows a delivered task's: the repr of its argument list."""
    return str(saferepr([str(retrieval_id)]))


def result_repr(outcome: object) -> str:
    """A row's result as Celery sends a task's return value: its bounded repr."""
    return str(saferepr(outcome, RESULT_REPR_MAXSIZE))


def naming_event(task_id: str, retrieval_id: uuid.UUID | str) -> tuple[str, dict[str, Any]]:
    """The late event that gives a delivered message's row the retrieval it claimed."""
    return "task-sent", {
        "uuid": task_id,
        "name": RETRIEVE_NEXT_TASK,
        "args": args_repr(retrieval_id),
    }


def start_events(task_id: str, retrieval_id: uuid.UUID | str) -> list[tuple[str, dict[str, Any]]]:
    """The events of a claim without a message, before it runs: as Celery's for a delivery."""
    received = {
        "uuid": task_id,
        "name": RETRIEVE_NEXT_TASK,
        "args": args_repr(retrieval_id),
        "kwargs": "{}",
        "root_id": task_id,
        "parent_id": None,
        "retries": 0,
        "eta": None,
        "expires": None,
    }
    return [("task-received", received), ("task-started", {"uuid": task_id})]


def end_event(
    task_id: str, runtime: float, outcome: object = None, error: BaseException | None = None
) -> tuple[str, dict[str, Any]]:
    """The event that ends a claim without a message: its outcome, or what it raised."""
    if error is not None:
        trace = "".join(traceback.format_exception(error))
        return "task-failed", {"uuid": task_id, "exception": saferepr(error), "traceback": trace}
    return "task-succeeded", {"uuid": task_id, "result": result_repr(outcome), "runtime": runtime}


def delivered_outcome(outcome: dict[str, Any] | None) -> dict[str, Any] | None:
    """A delivered batch task's result: the outcome of the retrieval its row names, and how
    many follow-ons it ran (each a row of its own, with its own outcome) instead of theirs."""
    if outcome is None or "then" not in outcome:
        return outcome
    first = {key: value for key, value in outcome.items() if key != "then"}
    return {**first, "follow_ons": len(outcome["then"])}


def _delivered_task_id() -> str | None:
    """The id of the `evidence.retrieve_next` message this thread runs, if its row names no
    retrieval yet (None for a follow-on, a fanned-out run, or outside a worker's task)."""
    task = app.current_worker_task
    if task is None or task.name != RETRIEVE_NEXT_TASK:
        return None
    task_id: str | None = task.request.id
    if task_id is None or getattr(_named, "task_id", None) == task_id:
        return None
    return task_id


def listed(retrieval_id: uuid.UUID, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a claimed batch retrieval (`run` returns its outcome), listed in Flower."""
    dispatcher = _dispatcher()
    if dispatcher is None:
        return run()
    delivered = _delivered_task_id()
    if delivered is not None:
        _named.task_id = delivered
        _send(dispatcher, [naming_event(delivered, retrieval_id)])
        return run()
    task_id = str(uuid.uuid4())
    _send(dispatcher, start_events(task_id, retrieval_id))
    started = time.monotonic()
    try:
        outcome = run()
    except BaseException as exc:
        _send(dispatcher, [end_event(task_id, time.monotonic() - started, error=exc)])
        raise
    _send(dispatcher, [end_event(task_id, time.monotonic() - started, outcome)])
    return outcome


def _send(dispatcher: Any, events: list[tuple[str, dict[str, Any]]]) -> None:
    """Through the worker's dispatcher (many threads share it: `task_events`). An event that
    cannot be sent must not cost the retrieval: Flower misses that row, as it would a lost
    event of Celery's own."""
    for event_type, fields in events:
        try:
            dispatcher.send(event_type, **fields)
        except Exception as exc:  # noqa: BLE001  (the broker's trouble is not the retrieval's)
            log.warning("task_event_not_sent", task_event=event_type, error=type(exc).__name__)
            return
