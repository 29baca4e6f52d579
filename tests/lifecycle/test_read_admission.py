"""Read admission: polls and reads per workspace within a rate, 429 `rate_limited` over it; an
early poll answered from memory; a long-poll counted once; overrides applied within seconds;
early polls of a workspace polling early in a loop wait for their advice."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from api.services import admission as quotas
from api.services import poll_advice, read_admission, waiters
from api.services import retrievals as retrieval_service
from api.services.counters import REGISTRY
from tests.support.factories import Api, body, cancel_open, check_envelope, make_key, parked
from tests.support.redis_scripts import ScriptRuns
from tests.support.services import ROOT, wait_for
from tests.support.slowdown import scaled
from worker.domain import clock
from worker.lanes import quota_overrides as quota_store
from worker.store import db

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, workspace: uuid.UUID) -> Iterator[None]:
    """Each test sees the overrides it sets; early polls are held briefly (speed only)."""
    monkeypatch.setattr(read_admission, "HOLD_SECONDS", 0.05)
    quotas.overrides.clear()
    quotas.readers.reset()
    read_admission.reset()
    poll_advice.advice.clear()
    poll_advice.early.clear()
    poll_advice.early.clear()
    yield
    cancel_open(workspace)
    quotas.overrides.clear()
    quotas.readers.reset()
    read_admission.reset()
    poll_advice.advice.clear()
    poll_advice.early.clear()


def read_quota(workspace: uuid.UUID, rate: float, burst: int) -> None:
    """Set the workspace's read rate as `evidence quotas set --read-rate --read-burst` does."""
    wanted = quota_store.Override(workspace, None, None, None, read_rate=rate, read_burst=burst)
    db.with_transient_retry(lambda s: quota_store.set_override(s, wanted, clock.now()))


def refused(response: httpx.Response) -> int:
    """The 429's Retry-After, checked against its envelope."""
    error = check_envelope(response, 429, "rate_limited")
    seconds = error["details"]["retry_after_seconds"]
    assert isinstance(seconds, int) and seconds >= 1
    assert response.headers["Retry-After"] == str(seconds)
    return seconds


class Queries:
    """Statements the process's engine runs (the API key lookup left out: it is cached per key
    for a few seconds, and a slow machine may let that lapse between two requests)."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def __enter__(self) -> Queries:
        sa.event.listen(db.get_engine(), "before_cursor_execute", self._seen)
        return self

    def __exit__(self, *exc: object) -> None:
        sa.event.remove(db.get_engine(), "before_cursor_execute", self._seen)

    def _seen(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if "api_key" not in statement:
            self.statements.append(statement)


class TestPolls:
    def test_over_the_rate_is_429_and_another_workspace_is_not(
        self, api: Api, http: Any, workspace: uuid.UUID
    ) -> None:
        """Two GETs in the burst of two; the third is 429 with the envelope and the header; a
        second workspace with the same quota still has its own two."""
        read_quota(workspace, 0.01, 2)
        [retrieval_id] = parked(workspace)
        assert [api.get(retrieval_id).status_code for _ in range(2)] == [200, 200]
        refused(api.get(retrieval_id))
        other = uuid.uuid4()
        read_quota(other, 0.01, 2)
        other_api = Api(http, make_key([other]))
        [theirs] = parked(other)
        try:
            assert [other_api.get(theirs).status_code for _ in range(2)] == [200, 200]
            refused(other_api.get(theirs))
        finally:
            cancel_open(other)

    def test_an_early_poll_touches_neither_database_nor_redis(
        self, api: Api, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Refused once, the same poll before its Retry-After is refused from memory: no
        statement, no bucket script; a replayed POST alike."""
        read_quota(workspace, 0.01, 1)
        [retrieval_id] = parked(workspace)
        assert api.get(retrieval_id).status_code == 200
        retry_after = refused(api.get(retrieval_id))
        payload = body("https://example.org/early", workspace)
        assert api.post(payload).status_code == 202  # a new one: the write rate's, not a read
        refused(api.post(payload))  # its replay is a read: none left
        scripts = ScriptRuns(monkeypatch)
        with Queries() as queries:
            assert refused(api.get(retrieval_id)) <= retry_after
            refused(api.post(payload))
        assert queries.statements == []
        assert scripts.count == 0

    def test_refusals_are_held_before_they_are_answered(
        self, api: Api, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A refused GET and batch-get (the bucket's, then the note's) each wait out a hold of
        half to all of HOLD_SECONDS before their 429, and the note counts the Retry-After from
        the answer; an admitted GET and a refused replayed POST (a plain route) are not held."""
        holds: list[float] = []

        async def hold(seconds: float) -> None:
            holds.append(seconds)

        monkeypatch.setattr(read_admission, "_sleep", hold)
        monkeypatch.setattr(read_admission, "HOLD_SECONDS", 30.0)  # recorded, never slept
        # The longest hold, then the shortest: the note's Retry-After is then capped (60 s).
        chosen = iter([30.0, 15.0, 20.0])
        monkeypatch.setattr(read_admission, "hold_for", lambda: next(chosen))
        read_quota(workspace, 0.01, 1)
        [retrieval_id] = parked(workspace)
        payload = body("https://example.org/held", workspace)
        assert api.post(payload).status_code == 202
        assert api.get(retrieval_id).status_code == 200
        assert holds == []
        retry_after = refused(api.get(retrieval_id))  # the bucket's refusal
        assert len(holds) == 1 and 15.0 <= holds[0] <= 30.0
        # A client that respects Retry-After counts it from the answer, after the hold.
        left = read_admission.notes.remaining(workspace, str(retrieval_id))
        assert left > retry_after + 10
        again = refused(api.get(retrieval_id))  # the note's
        assert len(holds) == 2 and 15.0 <= holds[1] <= 30.0
        # Not told to come back before the note ends (a capped Retry-After shortens the note).
        assert read_admission.notes.remaining(workspace, str(retrieval_id)) <= holds[1] + again
        refused(api.batch_get([retrieval_id]))
        refused(api.post(payload))  # a replay: a read, refused at once
        assert len(holds) == 3

    def test_a_long_poll_counts_once(self, api: Api, workspace: uuid.UUID) -> None:
        """A wait that reads three times (start, a cancel's notification, the end) takes one
        token of two: one plain GET is still answered, the next is not."""
        read_quota(workspace, 0.01, 2)
        [waited, cancelled] = parked(workspace, 2)
        answers: list[httpx.Response] = []
        waiting = threading.Thread(target=lambda: answers.append(api.long_poll(waited, "wait=2")))
        waiting.start()
        api.cancel(cancelled)  # cancels are not limited
        waiting.join()
        assert answers[0].status_code == 200
        assert answers[0].headers["Preference-Applied"] == "wait=2"
        assert api.get(cancelled).status_code == 200
        refused(api.get(waited))

    def test_batch_get_costs_a_token_per_hundred_ids(self, api: Api, workspace: uuid.UUID) -> None:
        """150 ids cost two tokens of three: one GET more is answered, then 429, as is the
        same batch-get again."""
        read_quota(workspace, 0.01, 3)
        [retrieval_id] = parked(workspace)
        ids = [retrieval_id, *(str(uuid.uuid4()) for _ in range(149))]
        assert api.batch_get(ids).status_code == 200
        assert api.get(retrieval_id).status_code == 200
        refused(api.get(retrieval_id))
        refused(api.batch_get(ids))

    def test_replayed_batch_items_are_polls(self, api: Api, workspace: uuid.UUID) -> None:
        """A batch POST's replayed items cost a read token per hundred, as a batch-get does;
        over the read rate each replay is answered 429 while a new item beside it is still
        created, and a malformed item keeps its own 400."""
        read_quota(workspace, 0.01, 1)
        first, second = (body(f"https://example.org/replayed/{n}", workspace) for n in range(2))
        malformed = {"workspace_id": str(workspace), "url": "not a url"}
        statuses = [r["status"] for r in api.batch([first, second, malformed]).json()["results"]]
        assert statuses == [202, 202, 400]  # new items cost write tokens, not reads
        replayed = api.batch([first, second, malformed])
        assert [r["status"] for r in replayed.json()["results"]] == [200, 200, 400]
        third = body("https://example.org/replayed/new", workspace)
        refused_batch = api.batch([first, third, second, malformed])
        results = refused_batch.json()["results"]
        assert [r["status"] for r in results] == [429, 202, 429, 400]
        for result in (results[0], results[2]):
            assert result["error"]["code"] == "rate_limited"
            assert result["error"]["details"]["retry_after_seconds"] >= 1
        assert int(refused_batch.headers["Retry-After"]) >= 1

    def test_the_read_side_is_admitted(self, api: Api, http: Any, workspace: uuid.UUID) -> None:
        """Evidence by id and passage search take their workspace's tokens too."""
        read_quota(workspace, 0.01, 2)
        assert api.evidence(str(uuid.uuid4())).status_code == 404  # a miss costs a token too
        search = {"workspace_id": str(workspace), "query": "anything"}
        answered = http.post("/research-api/chunks/search", json=search, headers=api.headers)
        assert answered.status_code == 200
        refused(api.evidence(str(uuid.uuid4())))
        refused(http.post("/research-api/chunks/search", json=search, headers=api.headers))


def held_count() -> float:
    """Polls this process has held for their advice so far."""
    return REGISTRY.get_sample_value("evidence_polls_held_total") or 0.0


class TestEarlyPolls:
    """A GET before the Retry-After its key was given, from a workspace with more than
    EARLY_POLLS_PER_SECOND such polls, waits for it (api.services.poll_advice): no thread, no
    read meanwhile, answered at once when the retrieval settles; a workspace that polls early
    now and then, and a long-poll, never wait."""

    def test_a_few_early_polls_are_answered_at_once(
        self, api: Api, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(retrieval_service, "MIN_RETRY_AFTER_SECONDS", 30)
        [retrieval_id] = parked(workspace)
        before = held_count()
        for _ in range(poll_advice.EARLY_POLLS_PER_SECOND):  # told 30 s, back at once
            answer = api.get(retrieval_id)
            assert answer.status_code == 200 and answer.headers["Retry-After"] == "30"
        assert held_count() == before

    def test_it_waits_until_its_advice_is_due(
        self, api: Api, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(retrieval_service, "MIN_RETRY_AFTER_SECONDS", 3)
        monkeypatch.setattr(poll_advice, "EARLY_POLLS_PER_SECOND", 0)  # any early poll loops
        [retrieval_id] = parked(workspace)
        before = held_count()
        assert api.get(retrieval_id).status_code == 200  # the first: not early
        told = time.monotonic()
        assert held_count() == before
        answer = api.get(retrieval_id)
        assert time.monotonic() - told >= 2.5  # the advice was 3 s, given just before `told`
        assert answer.status_code == 200
        assert answer.json()["retrieval"]["state"] == "pending"
        assert held_count() == before + 1
        # A long-poll is a wait of its own: never held, though early.
        assert api.long_poll(retrieval_id, "wait=0").status_code == 200
        assert held_count() == before + 1
        # Nor is another key's poll: the advice was given to this one.
        other = Api(api.client, make_key([workspace]))
        assert other.get(retrieval_id).status_code == 200
        assert held_count() == before + 1

    def test_the_posts_advice_counts(
        self, api: Api, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A poll straight after the POST comes back before the POST's Retry-After: it waits
        like any early poll (a poller that ignores advice would otherwise read each new
        retrieval at once), in whichever API process it lands (the advice is shared through
        Redis); another key's first poll does not."""
        monkeypatch.setattr(retrieval_service, "MIN_RETRY_AFTER_SECONDS", 2)
        monkeypatch.setattr(poll_advice, "EARLY_POLLS_PER_SECOND", 0)
        # Not published: a worker failing it at once would settle it before the poll.
        monkeypatch.setattr(retrieval_service, "publish_new", lambda *_: None)
        posted = api.post(body("https://example.org/post-advice", workspace))
        assert posted.status_code == 202 and posted.headers["Retry-After"] == "2"
        retrieval_id = posted.json()["retrieval"]["id"]
        poll_advice.advice.clear()  # as if the POST was answered by another API process
        before = held_count()
        other = Api(api.client, make_key([workspace]))
        assert other.get(retrieval_id).status_code == 200
        assert held_count() == before
        assert api.get(retrieval_id).status_code == 200
        assert held_count() == before + 1

    def test_a_polls_advice_counts_in_every_process(
        self, api: Api, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The advice a poll's answer gives is shared through Redis like the POST's (by the
        read's thread, before the answer leaves): the next early poll waits in whichever API
        process it lands."""
        monkeypatch.setattr(retrieval_service, "MIN_RETRY_AFTER_SECONDS", 2)
        monkeypatch.setattr(poll_advice, "EARLY_POLLS_PER_SECOND", 0)
        [retrieval_id] = parked(workspace)  # recorded without a POST: no advice given yet
        before = held_count()
        assert api.get(retrieval_id).headers["Retry-After"] == "2"  # not early: read at once
        assert held_count() == before
        poll_advice.advice.clear()  # as if that poll was answered by another API process
        assert api.get(retrieval_id).status_code == 200
        assert held_count() == before + 1

    def test_a_retrieval_that_settled_is_answered_at_once(
        self, api: Api, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Advice given elsewhere still stands, but the retrieval settled before the poll came:
        the settle was announced to this process, and the poll is read at once."""
        monkeypatch.setattr(retrieval_service, "MIN_RETRY_AFTER_SECONDS", 30)
        monkeypatch.setattr(poll_advice, "EARLY_POLLS_PER_SECOND", 0)
        monkeypatch.setattr(retrieval_service, "publish_new", lambda *_: None)
        posted = api.post(body("https://example.org/settled-advice", workspace))
        retrieval_id = posted.json()["retrieval"]["id"]
        assert api.long_poll(retrieval_id, "wait=0").status_code == 200  # the hub listens
        api.cancel(retrieval_id)
        hubs = list(waiters._hubs.values())
        wait_for(lambda: any(retrieval_id in hub.recent for hub in hubs), timeout=scaled(10))
        poll_advice.advice.clear()  # only the shared note stands, as in another process
        before, started = held_count(), time.monotonic()
        assert api.get(retrieval_id).json()["retrieval"]["state"] == "cancelled"
        assert held_count() == before and time.monotonic() - started < 10

    def test_it_is_answered_when_the_retrieval_settles(
        self, api: Api, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(retrieval_service, "MIN_RETRY_AFTER_SECONDS", 30)
        monkeypatch.setattr(poll_advice, "EARLY_POLLS_PER_SECOND", 0)
        [retrieval_id] = parked(workspace)
        assert api.get(retrieval_id).status_code == 200
        before = held_count()
        answers: list[tuple[httpx.Response, float]] = []
        started = time.monotonic()
        poll = threading.Thread(
            target=lambda: answers.append((api.get(retrieval_id), time.monotonic()))
        )
        poll.start()
        wait_for(lambda: held_count() == before + 1, timeout=scaled(10))
        scripts = ScriptRuns(monkeypatch)
        with Queries() as queries:  # while it waits: no statement, no bucket script
            time.sleep(0.5)
        assert queries.statements == [] and scripts.count == 0
        api.cancel(retrieval_id)
        poll.join(timeout=60)
        response, answered_at = answers[0]
        assert response.json()["retrieval"]["state"] == "cancelled"
        assert answered_at - started < 20  # woken by the settle, not at the 30 s advice
        # Settled: no advice stands, so the next poll is not early and is answered at once.
        assert api.get(retrieval_id).json()["retrieval"]["state"] == "cancelled"
        assert held_count() == before + 1

    @pytest.mark.parametrize("noted_in", ["this process", "another process"])
    def test_after_running_it_waits_for_the_settle_not_the_advice(
        self, api: Api, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch, noted_in: str
    ) -> None:
        """A running retrieval's 1 s advice is for a client that polls once a second; a looping
        client's early poll of it waits for the settle instead (nothing else about it changes),
        wherever the running answer was given."""
        monkeypatch.setattr(poll_advice, "EARLY_POLLS_PER_SECOND", 0)
        [retrieval_id] = parked(workspace)
        running(retrieval_id)
        first = api.get(retrieval_id)
        assert first.json()["retrieval"]["state"] == "running"
        assert first.headers["Retry-After"] == "1"
        if noted_in == "another process":
            poll_advice.advice.clear()
            poll_advice.running_answers.clear()
        before, started = held_count(), time.monotonic()
        answers: list[httpx.Response] = []
        poll = threading.Thread(target=lambda: answers.append(api.get(retrieval_id)))
        poll.start()
        wait_for(lambda: held_count() == before + 1, timeout=scaled(10))
        poll.join(timeout=2.5)  # past the advice: still waiting
        assert poll.is_alive() and not answers
        api.cancel(retrieval_id)
        poll.join(timeout=60)
        assert answers[0].json()["retrieval"]["state"] == "cancelled"
        assert time.monotonic() - started < 20  # woken by the settle, not at the 30 s bound


def running(retrieval_id: str) -> None:
    """Mark a parked retrieval running, as a worker's claim leaves it for its poller."""
    from worker.store.models import Retrieval

    T = Retrieval.__table__.c  # type: ignore[attr-defined]
    update = sa.update(Retrieval).where(T.id == uuid.UUID(retrieval_id)).values(state="running")
    db.with_transient_retry(lambda session: session.execute(update))


def test_overrides_apply_within_seconds(api: Api, workspace: uuid.UUID) -> None:
    """`evidence quotas set --read-rate --read-burst` takes effect within the override cache's
    few seconds, and `quotas show` lists it."""
    [retrieval_id] = parked(workspace)
    assert api.get(retrieval_id).status_code == 200  # the defaults are now cached
    command = [sys.executable, "-m", "api.cli", "quotas", "set", "--workspace", str(workspace)]
    command += ["--read-rate", "0.01", "--read-burst", "1"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith(str(workspace)))
    assert row.split()[-3:-1] == ["0.01", "1"]  # read /s, read burst; then open now
    wait_for(
        lambda: api.get(retrieval_id).status_code == 429,
        timeout=quotas.OVERRIDE_CACHE_SECONDS + 10,
        interval=0.2,
    )
