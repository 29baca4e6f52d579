"""Early polls wait for their advice, once a workspace polls early in a loop.

An open retrieval's answer tells its poller when to ask again (`Retry-After`). A client that
ignored it and polled in a loop got a database read per poll until its read bucket ran dry:
`make overload`'s 256 pollers were answered about 150 real reads a second at the default read
rate, and the API spent a core on them (docs/measurements.md, "Where a POST waits").

So every advice given, by the POST that created the retrieval or by a poll's answer, is noted
per key and retrieval: in the process that gave it, and in Redis until it falls due (a
poller's next request may reach another API process: with the note in one process only, half
of the early polls went unnoticed and were read at once). Each process counts per workspace
the polls that come back before theirs. A `GET …/retrievals/{id}` (without `Prefer: wait`)
that is early, from a workspace with more than EARLY_POLLS_PER_SECOND early polls in one
second (and from then on until LINGER_SECONDS pass with no early poll and no
wait ending), waits in the event loop (no thread, no database): until its advice is due,
or, when the answer it came too early after said `running`, until the retrieval settles (a
running retrieval changes only then), at most MAX_WAIT_SECONDS; it also ends early on the
settle notification long-polls wait on. Then it is read and answered as usual, for one read
token. One that settled before the poll came is not held (the settle was announced to this
process too). Nothing is refused and no state is served stale: the poll is read when it is
answered, as a long-poll would be. Without Redis the process's own notes are all there is:
advice is soft, and never fails or slows the answer it rides on beyond the shared-state
bound.

A workspace that polls early now and then (an agent asking about a few retrievals a little
faster than advised) is answered at once, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
import uuid
from collections.abc import Callable

from redis.exceptions import RedisError

from api.services import waiters
from api.services.counters import POLLS_HELD
from api.services.read_admission import NOTES_SIZE, Notes
from worker.platform import redis_clients

#: Early polls a second from one workspace (in one API process) past which they wait. Well
#: under the default read rate: the polls refused for that rate are never counted here, so at
#: 100 a client polling in a loop on 256 connections was refused before it was caught, and its
#: admitted polls (at most the rate, over two processes) never passed it. An agent polling five
#: retrievals four times a second stays under it.
EARLY_POLLS_PER_SECOND = 25
#: How long a workspace found polling early in a loop stays so after its last early poll (or
#: the end of its last wait).
LINGER_SECONDS = 30.0
#: Longest an early poll waits (the long-poll's bound): a longer advice is read again after it.
MAX_WAIT_SECONDS = 30.0
#: Where the advice given to a key on a retrieval is kept for the other API processes (it
#: expires when it falls due).
SHARED_PREFIX = "evidence:poll-advice:"


class EarlyPolls:
    """Early polls per workspace, counted in whole seconds of this process's clock.

    A workspace starts looping past EARLY_POLLS_PER_SECOND in one second and stays looping
    until LINGER_SECONDS pass with no early poll of it and no end of a wait. Without the
    linger the trigger fed back on itself: once a looping client's polls waited, fewer of them
    came per second, its count fell under the threshold, and its next early polls were read
    at once until the count rose again (under the overload bench's pollers, about a third of
    their early polls were read at once: docs/measurements.md). The linger also makes a count
    over the second before needless: a second over the trigger has started it.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: workspace -> (its current second, early polls in it)
        self._counts: dict[uuid.UUID, tuple[int, int]] = {}
        #: workspace -> until when it counts as looping (LINGER_SECONDS past its last early poll
        #: or the end of its last wait)
        self._looping_until: dict[uuid.UUID, float] = {}
        self._lock = threading.Lock()

    def _current(self, workspace_id: uuid.UUID, second: int) -> int:
        """The workspace's early polls in `second`."""
        last_second, count = self._counts.get(workspace_id, (second, 0))
        return count if second == last_second else 0

    def looping(self, workspace_id: uuid.UUID) -> bool:
        """Count one early poll of the workspace; whether it polls early in a loop: its early
        polls in this second are more than EARLY_POLLS_PER_SECOND, or it was found looping
        and has made an early poll (or ended a wait) within LINGER_SECONDS since."""
        at = self._clock()
        second = int(at)
        with self._lock:
            count = self._current(workspace_id, second) + 1
            if len(self._counts) >= NOTES_SIZE and workspace_id not in self._counts:
                self._counts.clear()
                self._looping_until.clear()
            self._counts[workspace_id] = (second, count)
            over = count > EARLY_POLLS_PER_SECOND
            if not over and self._looping_until.get(workspace_id, -math.inf) <= at:
                self._looping_until.pop(workspace_id, None)
                return False
            self._looping_until[workspace_id] = at + LINGER_SECONDS
            return True

    def held(self, workspace_id: uuid.UUID) -> None:
        """A poll of a looping workspace ended its wait: the linger starts again from now. Its
        connections may all have waited up to MAX_WAIT_SECONDS, with no early poll meanwhile;
        counted from the last early poll alone, the linger ran out as they came back, and their
        first polls were read at once until the count passed the trigger again."""
        with self._lock:
            if workspace_id in self._looping_until:
                self._looping_until[workspace_id] = self._clock() + LINGER_SECONDS

    def would_loop(self, workspace_id: uuid.UUID) -> bool:
        """Whether one more early poll would find the workspace looping (nothing counted)."""
        at = self._clock()
        if self._looping_until.get(workspace_id, -math.inf) > at:
            return True
        return self._current(workspace_id, int(at)) + 1 > EARLY_POLLS_PER_SECOND

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()
            self._looping_until.clear()


#: When the advice this process gave a key on a retrieval falls due: (key, retrieval id).
advice = Notes()
#: The advice among those given on an answer that said `running`: (key, retrieval id), for
#: as long as a poll it lengthens may wait.
running_answers = Notes()
early = EarlyPolls()
#: A shared note's value when the answer it notes said `running` (any other: pending).
RUNNING = b"running"


def hold_seconds(
    key_id: uuid.UUID,
    workspace_id: uuid.UUID,
    retrieval_id: uuid.UUID,
    elsewhere: float = 0.0,
    running_elsewhere: bool = False,
) -> float:
    """How long this poll waits: 0 unless it is early and its workspace polls early in a loop;
    then until its advice is due, or MAX_WAIT_SECONDS (its settle ends the wait sooner) after
    an answer that said `running`. The advice is this process's note, else what another
    process noted: due in `elsewhere` seconds, on an answer `running_elsewhere`."""
    subject = str(retrieval_id)
    left = advice.remaining(key_id, subject)
    if left > 0:
        was_running = running_answers.remaining(key_id, subject) > 0
    else:
        left, was_running = elsewhere, running_elsewhere
    if left <= 0 or not early.looping(workspace_id):
        return 0.0
    return MAX_WAIT_SECONDS if was_running else min(left, MAX_WAIT_SECONDS)


def _shared_name(key_id: uuid.UUID, retrieval_id: uuid.UUID) -> str:
    return f"{SHARED_PREFIX}{key_id}:{retrieval_id}"


def given(
    key_id: uuid.UUID, retrieval_id: uuid.UUID, seconds: int | None, running: bool = False
) -> None:
    """The answer told `key_id` to ask about `retrieval_id` again after `seconds` (None: it
    settled, and no advice stands), and whether it said `running`, as this process notes it."""
    subject = str(retrieval_id)
    if seconds is None:
        advice.forget(key_id, subject)
    else:
        advice.note(key_id, subject, seconds)
    if running and seconds is not None:
        running_answers.note(key_id, subject, MAX_WAIT_SECONDS)
    else:
        running_answers.forget(key_id, subject)


def share(
    key_id: uuid.UUID, retrieval_id: uuid.UUID, seconds: int | None, running: bool = False
) -> None:
    """Note the advice `given` for the other API processes too (from a worker thread: a POST's
    once its answer is sent, a poll's before). A settled answer leaves the shared note to
    expire: a poll of a retrieval that settled is not held anyway (its settle was announced),
    and a delete per settled read would cost every read of a settled retrieval a round trip."""
    if seconds is not None:
        value = RUNNING if running else b"pending"
        with contextlib.suppress(RedisError):
            name = _shared_name(key_id, retrieval_id)
            redis_clients.shared().set(name, value, px=seconds * 1000)


async def _elsewhere(key_id: uuid.UUID, retrieval_id: uuid.UUID) -> tuple[float, bool]:
    """Seconds until the advice another process gave falls due (0 when none stands, or Redis
    cannot say), and whether its answer said `running`."""
    name = _shared_name(key_id, retrieval_id)
    try:
        async with redis_clients.shared_async().pipeline(transaction=False) as pipe:
            pipe.pttl(name)
            pipe.get(name)
            millis, value = await pipe.execute()
    except (RedisError, OSError, TimeoutError):
        return 0.0, False
    return max(0.0, float(millis) / 1000), value == RUNNING


async def wait_for_advice(
    key_id: uuid.UUID, workspace_id: uuid.UUID, retrieval_id: uuid.UUID
) -> None:
    """Wait, holding no thread, for as long as `hold_seconds` says or until the retrieval
    settles; at once when the poll is not early or its workspace does not poll early in a
    loop."""
    # Redis is asked only for a workspace this process already sees looping: a poll of any
    # other is answered at once whatever it was told, so the round trip would buy nothing.
    elsewhere, running_elsewhere = 0.0, False
    if advice.remaining(key_id, str(retrieval_id)) <= 0 and early.would_loop(workspace_id):
        elsewhere, running_elsewhere = await _elsewhere(key_id, retrieval_id)
    seconds = hold_seconds(key_id, workspace_id, retrieval_id, elsewhere, running_elsewhere)
    hub = waiters.hub()
    if seconds <= 0 or hub.settled_lately(str(retrieval_id)):
        return
    POLLS_HELD.inc()
    try:
        with hub.watch([str(retrieval_id)]) as settled, contextlib.suppress(TimeoutError):
            await asyncio.wait_for(settled.wait(), seconds)
    finally:
        early.held(workspace_id)
