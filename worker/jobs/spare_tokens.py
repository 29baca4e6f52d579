"""Batch tokens a threads worker's task thread takes itself, past Celery's delivery.

A batch-lane message stands for "run the next batch retrieval": tokens are interchangeable, and
the claim picks the retrieval (`worker.retrieval.claims.claim_next_batch`). Celery hands
messages over one at a time on the worker's consumer thread (a BRPOP, a request, its events,
later an ack), and that thread shares one interpreter with every task thread: at the latency
mix a worker with 256 threads ran only 80-100 retrievals at once, at about 90 deliveries a
second, while 800 tokens waited in Redis and threads idled. So a task thread that finished a
batch retrieval takes the next token straight from the lane's queue and runs the next claim.

It does so only while nothing else wants its thread: no message waiting for a thread in this
process (`lane_pool.work_waiting`), no message in a queue the broker ranks before the batch
lane (checked and popped in one Lua call), and the worker not stopping. A token taken this way
is spent as a delivered one is. The retrieval it stands for is a database row: if this process
dies holding it, the claim's lease runs out and the sweep brings it back, as for any lost
message.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import redis
from celery.worker import state as worker_state

from worker.jobs import lane_pool
from worker.jobs.celery_app import BATCH_QUEUE, QUEUE_PRIORITY, app
from worker.platform import redis_clients
from worker.platform.settings import get_settings

#: Follow-on retrievals one batch task runs at most (its Flower entry and log line end then).
MAX_FOLLOW_ONS = 32
#: Pop the last key (the batch queue) only when every other key (queues ranked before it) is
#: empty; nil otherwise.
_TAKE = """
for i = 1, #KEYS - 1 do
  if redis.call('LLEN', KEYS[i]) > 0 then return false end
end
return redis.call('RPOP', KEYS[#KEYS])
"""

_lock = threading.Lock()
_script: Any = None
_keys: list[str] = []


def _prepare() -> tuple[Any, list[str]]:
    global _script, _keys
    with _lock:
        if _script is None:
            client = redis_clients.connect(get_settings().broker_url, timeout=2)
            consumed = app.amqp.queues.consume_from or app.amqp.queues
            ahead = QUEUE_PRIORITY[: QUEUE_PRIORITY.index(BATCH_QUEUE)]
            _keys = [q for q in ahead if q in consumed] + [BATCH_QUEUE]
            _script = client.register_script(_TAKE)
        return _script, _keys


def _stopping() -> bool:
    """Whether the worker is shutting down (Celery sets an exit code, which may be 0)."""
    return any(
        flag is not None and flag is not False
        for flag in (worker_state.should_stop, worker_state.should_terminate)
    )


def take() -> bool:
    """Take one batch token for this thread's next claim; False when the thread should go back
    to Celery instead (other work waits, the worker stops, the lane's queue is empty, or the
    broker cannot be asked)."""
    if _stopping():
        return False
    if not lane_pool.follow_ons_allowed() or lane_pool.work_waiting():
        return False
    script, keys = _prepare()
    try:
        return script(keys=keys) is not None
    except redis.RedisError:
        return False


#: Tokens one delivered batch message takes at most for the idle threads of its process.
MAX_FAN_OUT = 16


def fan_out(run: Callable[[], Any]) -> None:
    """Take a token for each idle thread of this process (at most `MAX_FAN_OUT`) and run `run`
    on that thread for it.

    Celery delivers a worker's messages one at a time on its consumer thread (~50-90 a second
    while the threads work): 256 threads took 5 s to fill at the start of a batch. A
    delivered batch message fills the idle threads it finds instead.
    """
    for _ in range(min(MAX_FAN_OUT, lane_pool.spare_threads())):
        if not take():
            return
        try:
            lane_pool.run_batch_work(run)
        except RuntimeError:  # the pool is stopping: the sweep republishes the token's row
            return
