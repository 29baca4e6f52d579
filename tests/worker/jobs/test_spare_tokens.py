"""Batch tokens a task thread takes itself (`worker.jobs.spare_tokens`): only while nothing
else wants the thread, and never past a queue the broker ranks before the batch lane."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.conftest import Env
from tests.support.factories import parked
from tests.support.pages import article
from tests.support.tls_site import TLSSite
from worker.jobs import batch_tokens, lane_pool, spare_tokens
from worker.jobs.celery_app import BATCH_QUEUE, INTERACTIVE_QUEUE, SWEEP_QUEUE, WEBHOOK_QUEUE

#: A Redis database of its own: the session's worker consumes the real queues of database 0.
ISOLATED_DB = 7


@pytest.fixture
def queues(env: Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    """An idle lane pool's executor, and the lane queues in a database no worker reads."""
    client = redis.Redis.from_url(f"{env.broker_url.rsplit('/', 1)[0]}/{ISOLATED_DB}")
    assert client.connection_pool.connection_kwargs["db"] == ISOLATED_DB
    client.flushdb()
    monkeypatch.setattr(spare_tokens, "_script", client.register_script(spare_tokens._TAKE))
    order = [SWEEP_QUEUE, INTERACTIVE_QUEUE, WEBHOOK_QUEUE, BATCH_QUEUE]
    monkeypatch.setattr(spare_tokens, "_keys", order)
    executor = lane_pool.RankedExecutor(2)
    monkeypatch.setattr(lane_pool, "_executor", executor)
    yield client
    executor.shutdown(wait=True)
    client.flushdb()
    client.close()


def test_takes_batch_tokens_while_nothing_else_waits(queues: redis.Redis) -> None:
    queues.lpush(BATCH_QUEUE, "token-1", "token-2")
    assert spare_tokens.take() is True
    assert spare_tokens.take() is True
    assert spare_tokens.take() is False  # the lane's queue is empty
    assert queues.llen(BATCH_QUEUE) == 0


@pytest.mark.parametrize("ahead", [SWEEP_QUEUE, INTERACTIVE_QUEUE, WEBHOOK_QUEUE])
def test_leaves_the_token_when_a_queue_ranked_before_holds_a_message(
    queues: redis.Redis, ahead: str
) -> None:
    """The thread goes back to Celery, which takes that message first (`LaneOrder`)."""
    queues.lpush(BATCH_QUEUE, "token")
    queues.lpush(ahead, "message")
    assert spare_tokens.take() is False
    assert queues.llen(BATCH_QUEUE) == 1
    queues.delete(ahead)
    assert spare_tokens.take() is True


def test_leaves_the_token_when_a_delivered_message_waits_for_a_thread(
    queues: redis.Redis,
) -> None:
    import threading

    queues.lpush(BATCH_QUEUE, "token")
    executor = lane_pool._executor
    assert executor is not None
    release = threading.Event()
    for _ in range(2):  # both threads busy
        executor.submit(3, release.wait, 10)
    executor.submit(1, lambda: None)  # an interactive message waits for one of them
    try:
        assert lane_pool.work_waiting()
        assert spare_tokens.take() is False
        assert queues.llen(BATCH_QUEUE) == 1
    finally:
        release.set()


def test_never_on_a_worker_without_a_lane_pool(
    queues: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefork children run one task at a time under a hard time limit: no follow-ons."""
    monkeypatch.setattr(lane_pool, "_executor", None)
    queues.lpush(BATCH_QUEUE, "token")
    assert spare_tokens.take() is False
    assert queues.llen(BATCH_QUEUE) == 1


@pytest.mark.parametrize("flag", ["should_stop", "should_terminate"])
def test_never_while_the_worker_stops(
    queues: redis.Redis, monkeypatch: pytest.MonkeyPatch, flag: str
) -> None:
    """Celery's warm shutdown sets an exit code, 0 included: the thread ends its task."""
    from celery.worker import state

    monkeypatch.setattr(state, flag, 0)
    queues.lpush(BATCH_QUEUE, "token")
    assert spare_tokens.take() is False
    assert queues.llen(BATCH_QUEUE) == 1


def test_broker_trouble_means_back_to_celery(
    queues: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = redis.Redis(port=1, socket_connect_timeout=0.2)  # nothing listens there
    monkeypatch.setattr(spare_tokens, "_script", dead.register_script(spare_tokens._TAKE))
    assert spare_tokens.take() is False


def _states(ids: list[str]) -> dict[str, str]:
    from worker.store import db, retrieval_view

    with db.session_scope(readonly=True) as session:
        rows = [retrieval_view.get_retrieval(session, uuid.UUID(i)) for i in ids]
        return {str(row.id): row.state for row in rows if row is not None}


def test_spare_threads_count_busy_and_waiting_work(queues: redis.Redis) -> None:
    import threading

    executor = lane_pool._executor
    assert executor is not None and lane_pool.spare_threads() == 2
    release = threading.Event()
    started = threading.Semaphore(0)

    def hold() -> None:
        started.release()
        release.wait(10)

    executor.submit(3, hold)
    assert started.acquire(timeout=5)
    assert lane_pool.spare_threads() == 1
    executor.submit(3, hold)
    executor.submit(3, hold)  # waits for a thread
    assert started.acquire(timeout=5)
    assert lane_pool.spare_threads() == 0
    release.set()


@pytest.mark.lifecycle
@pytest.mark.usefixtures("services", "own_database")  # a batch lane holding only its rows
def test_a_batch_task_fills_the_idle_threads_with_the_tokens_it_takes(
    queues: redis.Redis, site: TLSSite
) -> None:
    """One batch message, two more tokens, two idle threads: the message's thread runs one
    retrieval, the idle threads the other two (no Celery delivery for them)."""
    import time

    workspace = uuid.uuid4()
    urls = [site.page(f"/fan/{uuid.uuid4().hex}", article(f"Fan {n}")) for n in range(3)]
    ids = parked(workspace, lane="batch", urls=urls)
    queues.lpush(BATCH_QUEUE, "token-2", "token-3")
    outcome = batch_tokens.run_next_batch()
    assert outcome is not None and "then" not in outcome
    assert queues.llen(BATCH_QUEUE) == 0
    deadline = time.monotonic() + 30
    while set(_states(ids).values()) != {"completed"} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _states(ids) == dict.fromkeys(ids, "completed")


@pytest.mark.lifecycle
@pytest.mark.usefixtures("services", "own_database")  # a batch lane holding only its rows
def test_a_batch_task_runs_the_retrievals_of_the_tokens_it_takes(
    queues: redis.Redis, site: TLSSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One batch message, two more tokens in the lane's queue, no idle thread: the task
    claims, runs and settles all three retrievals, and reports the two follow-ons under
    "then"."""
    monkeypatch.setattr(lane_pool, "spare_threads", lambda: 0)
    workspace = uuid.uuid4()
    urls = [site.page(f"/spare/{uuid.uuid4().hex}", article(f"Spare {n}")) for n in range(3)]
    ids = parked(workspace, lane="batch", urls=urls)
    queues.lpush(BATCH_QUEUE, "token-2", "token-3")
    outcome = batch_tokens.run_next_batch()
    assert outcome is not None
    assert len(outcome["then"]) == 2
    ran = {outcome["retrieval_id"], *(o["retrieval_id"] for o in outcome["then"])}
    assert ran == set(ids)
    assert {o["state"] for o in [outcome, *outcome["then"]]} == {"completed"}
    assert queues.llen(BATCH_QUEUE) == 0
