"""Batch retrievals listed in Flower (`worker.jobs.flower_tasks`): the events each claim sends,
read back by the event state Flower keeps (`flower.events.EventsState`, Celery's merge rules)."""

from __future__ import annotations

import ast
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from flower.events import EventsState

from tests.support.factories import parked
from tests.support.pages import article
from tests.support.services import wait_for
from tests.support.tls_site import TLSSite
from tests.worker.jobs.test_spare_tokens import queues  # noqa: F401  (the fixture)
from worker.jobs import flower_tasks, tasks
from worker.jobs.celery_app import BATCH_QUEUE, RETRIEVE_NEXT_TASK, app
from worker.retrieval.outcomes import task_outcome

HOST = "w-flower@test"
_clock = itertools.count(1)


def as_received(event_type: str, fields: dict[str, Any], at: float) -> dict[str, Any]:
    """An event as a receiver hands it to Flower's state (the dispatcher's own fields added)."""
    return {
        **fields,
        "type": event_type,
        "hostname": HOST,
        "timestamp": at,
        "local_received": at,
        "clock": next(_clock),
        "utcoffset": 0,
        "pid": 1,
    }


def replay(events: list[tuple[str, dict[str, Any]]], state: EventsState | None = None) -> Any:
    """Flower's state after `events`, one a second (so timestamps tell them apart)."""
    state = state or EventsState()
    start = time.time()
    for n, (event_type, fields) in enumerate(events):
        state.event(as_received(event_type, fields, start + n))
    return state


def delivered(task_id: str) -> list[tuple[str, dict[str, Any]]]:
    """What Celery sends for an `evidence.retrieve_next` message before it runs (no args)."""
    received = {"uuid": task_id, "name": RETRIEVE_NEXT_TASK, "args": "[]", "kwargs": "{}"}
    return [("task-received", received), ("task-started", {"uuid": task_id})]


def outcome_of(
    rid: uuid.UUID, status: str = "unavailable", reason: str | None = "not_found"
) -> dict[str, Any]:
    return task_outcome(rid, "settled", "completed", {"status": status, "reason": reason}, 1)


class TestEventState:
    """What Flower makes of the events: one row per retrieval, its id in args."""

    @pytest.mark.parametrize("naming_at", ["running", "after_success"])
    def test_a_delivered_row_is_named_without_changing_its_state(self, naming_at: str) -> None:
        task_id, rid = str(uuid.uuid4()), uuid.uuid4()
        succeeded = flower_tasks.end_event(task_id, 1.5, outcome_of(rid))
        naming = flower_tasks.naming_event(task_id, rid)
        events = delivered(task_id)
        events += [naming, succeeded] if naming_at == "running" else [succeeded, naming]
        state = replay(events[:3])
        task = state.tasks[task_id]
        assert task.state == ("STARTED" if naming_at == "running" else "SUCCESS")
        state = replay(events[3:], state)
        task = state.tasks[task_id]
        assert task.state == "SUCCESS"
        assert task.name == RETRIEVE_NEXT_TASK
        assert ast.literal_eval(task.args) == [str(rid)]
        assert ast.literal_eval(task.result) == outcome_of(rid)
        assert task.runtime == 1.5
        first = state.tasks[task_id].received
        assert first is not None and task.started is not None and first < task.started
        assert len(state.tasks) == 1 and state.task_count == 1

    def test_naming_leaves_the_prefetch_gauges_alone(self) -> None:
        """A second `task-received` would count the message as prefetched again, for ever."""
        metrics = EventsState().metrics
        gauge = metrics.number_of_prefetched_tasks.labels(HOST, RETRIEVE_NEXT_TASK)
        before = gauge._value.get()
        task_id, rid = str(uuid.uuid4()), uuid.uuid4()
        events = delivered(task_id) + [flower_tasks.naming_event(task_id, rid)]
        replay(events + [flower_tasks.end_event(task_id, 0.1, outcome_of(rid))])
        assert gauge._value.get() == before

    def test_a_claim_without_a_message_is_a_row_of_its_own(self) -> None:
        task_id, rid = str(uuid.uuid4()), uuid.uuid4()
        events = flower_tasks.start_events(task_id, rid)
        state = replay(events)
        assert state.tasks[task_id].state == "STARTED"
        outcome = outcome_of(rid, "blocked", "login_required")
        state = replay([flower_tasks.end_event(task_id, 0.25, outcome)], state)
        task = state.tasks[task_id]
        assert (task.state, task.name, task.runtime) == ("SUCCESS", RETRIEVE_NEXT_TASK, 0.25)
        assert task.args == repr([str(rid)])
        assert task.kwargs == "{}"
        assert ast.literal_eval(task.result) == outcome
        assert task.worker.hostname == HOST

    def test_a_claim_that_raised_is_a_failed_row(self) -> None:
        task_id, rid = str(uuid.uuid4()), uuid.uuid4()
        try:
            raise RuntimeError("the database went away")
        except RuntimeError as exc:
            error = exc
        events = flower_tasks.start_events(task_id, rid)
        state = replay([*events, flower_tasks.end_event(task_id, 0.1, error=error)])
        task = state.tasks[task_id]
        assert task.state == "FAILURE"
        assert "the database went away" in task.exception
        assert "RuntimeError" in task.traceback

    def test_flower_search_finds_rows_by_retrieval_id_and_reason(self) -> None:
        rows = {}
        state = EventsState()
        for status, reason in [("ready", None), ("unavailable", "not_found")]:
            task_id, rid = str(uuid.uuid4()), uuid.uuid4()
            rows[reason] = (task_id, rid)
            end = flower_tasks.end_event(task_id, 0.1, outcome_of(rid, status, reason))
            replay([*flower_tasks.start_events(task_id, rid), end], state)
        task_id, rid = rows["not_found"]
        found = state.search_engine.matching_ids("result:not_found")
        assert set(found) == {task_id}
        found = state.search_engine.matching_ids(f"args:{rid}")
        assert set(found) == {task_id}


class TestValues:
    def test_the_result_starts_with_status_and_reason(self) -> None:
        rid = uuid.uuid4()
        shown = flower_tasks.result_repr(outcome_of(rid))
        assert shown.startswith("{'status': 'unavailable', 'reason': 'not_found', ")
        assert list(outcome_of(rid)) == [
            "status",
            "reason",
            "state",
            "delivery",
            "attempt",
            "retrieval_id",
        ]

    def test_the_result_is_bounded_as_celery_bounds_a_task_result(self) -> None:
        from celery.utils.saferepr import saferepr

        big = {"then": ["x" * 100] * 100}
        task = tasks.retrieve_next
        assert task.resultrepr_maxsize == flower_tasks.RESULT_REPR_MAXSIZE
        shown = flower_tasks.result_repr(big)
        assert shown == saferepr(big, task.resultrepr_maxsize)
        assert len(shown) < len(repr(big)) / 5

    def test_args_are_the_retrieval_id_as_for_a_single(self) -> None:
        rid = uuid.uuid4()
        assert flower_tasks.args_repr(rid) == repr([str(rid)])
        assert flower_tasks.args_repr(str(rid)) == repr([str(rid)])

    @pytest.mark.parametrize(
        ("outcome", "shown"),
        [
            (None, None),
            (
                {"status": "ready", "delivery": "settled"},
                {"status": "ready", "delivery": "settled"},
            ),
            (
                {"status": "ready", "then": [{"status": "ready"}, {"delivery": "failed"}]},
                {"status": "ready", "follow_ons": 2},
            ),
            ({"status": "ready", "then": []}, {"status": "ready", "follow_ons": 0}),
        ],
    )
    def test_a_delivered_result_counts_its_follow_ons(
        self, outcome: dict[str, Any] | None, shown: dict[str, Any] | None
    ) -> None:
        assert flower_tasks.delivered_outcome(outcome) == shown


class Recorder:
    """A dispatcher that keeps what it is asked to send (`fail`: raises instead)."""

    def __init__(self, fail: bool = False) -> None:
        self.enabled = True
        self.fail = fail
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def send(self, event_type: str, **fields: Any) -> None:
        if self.fail:
            raise ConnectionError("broker gone")
        with self.lock:
            self.sent.append((event_type, fields))


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(flower_tasks, "_consumer", SimpleNamespace(event_dispatcher=recorder))
    return recorder


class TestListed:
    def test_outside_a_worker_nothing_is_sent(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(flower_tasks, "_consumer", None)
        rid = uuid.uuid4()
        assert flower_tasks.listed(rid, lambda: outcome_of(rid)) == outcome_of(rid)

    def test_nothing_is_sent_while_the_worker_sends_no_events(self, recorder: Recorder) -> None:
        recorder.enabled = False
        rid = uuid.uuid4()
        assert flower_tasks.listed(rid, lambda: outcome_of(rid)) == outcome_of(rid)
        assert recorder.sent == []

    def test_a_claim_outside_a_delivered_task_is_its_own_task(self, recorder: Recorder) -> None:
        rid = uuid.uuid4()
        assert flower_tasks.listed(rid, lambda: outcome_of(rid)) == outcome_of(rid)
        assert [t for t, _ in recorder.sent] == ["task-received", "task-started", "task-succeeded"]
        ids = {fields["uuid"] for _, fields in recorder.sent}
        assert len(ids) == 1
        assert recorder.sent[0][1]["args"] == repr([str(rid)])
        assert ast.literal_eval(recorder.sent[2][1]["result"]) == outcome_of(rid)
        assert recorder.sent[2][1]["runtime"] >= 0

    def test_each_claim_outside_a_delivered_task_gets_a_fresh_task_id(
        self, recorder: Recorder
    ) -> None:
        for _ in range(3):
            rid = uuid.uuid4()
            flower_tasks.listed(rid, lambda rid=rid: outcome_of(rid))  # type: ignore[misc]
        assert len({fields["uuid"] for _, fields in recorder.sent}) == 3

    def test_a_raising_claim_is_a_failed_task_and_still_raises(self, recorder: Recorder) -> None:
        def boom() -> dict[str, Any]:
            raise LookupError("gone")

        with pytest.raises(LookupError):
            flower_tasks.listed(uuid.uuid4(), boom)
        assert [t for t, _ in recorder.sent] == ["task-received", "task-started", "task-failed"]
        assert "gone" in recorder.sent[2][1]["exception"]

    def test_an_event_that_cannot_be_sent_costs_the_retrieval_nothing(
        self, recorder: Recorder
    ) -> None:
        recorder.fail = True
        rid = uuid.uuid4()
        assert flower_tasks.listed(rid, lambda: outcome_of(rid)) == outcome_of(rid)

    def test_a_delivered_task_names_its_first_claim_and_lists_the_others(
        self, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Run inside a real (eager) `evidence.retrieve_next` task: its first claim names its
        own row; a second claim in the same task (a follow-on) is a task of its own."""
        rids = [uuid.uuid4(), uuid.uuid4()]

        def two_claims() -> dict[str, Any] | None:
            first = flower_tasks.listed(rids[0], lambda: outcome_of(rids[0]))
            then = flower_tasks.listed(rids[1], lambda: outcome_of(rids[1], "ready", None))
            return {**first, "then": [then]}

        monkeypatch.setattr(tasks, "run_next_batch", two_claims)
        task_id = str(uuid.uuid4())
        result = tasks.retrieve_next.apply(task_id=task_id).get()
        assert result == {**outcome_of(rids[0]), "follow_ons": 1}
        naming, *others = recorder.sent
        assert naming == ("task-sent", flower_tasks.naming_event(task_id, rids[0])[1])
        assert [t for t, _ in others] == ["task-received", "task-started", "task-succeeded"]
        assert {fields["uuid"] for _, fields in others} != {task_id}
        assert others[0][1]["args"] == repr([str(rids[1])])


def _settled(ids: list[str]) -> bool:
    from worker.store import db, retrieval_view

    with db.session_scope(readonly=True) as session:
        rows = [retrieval_view.get_retrieval(session, uuid.UUID(i)) for i in ids]
    return all(row is not None and row.state == "completed" for row in rows)


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """Every event of a real dispatcher on the test broker, as a receiver (Flower) gets them;
    the dispatcher is the one `flower_tasks` sends through."""
    seen: list[dict[str, Any]] = []
    hostname = f"w-{uuid.uuid4().hex[:8]}@test"
    with app.connection_for_read() as reading, app.connection_for_write() as writing:
        receiver = app.events.Receiver(
            reading,
            handlers={"*": lambda e: seen.append(e) if e.get("hostname") == hostname else None},
        )
        thread = threading.Thread(target=lambda: receiver.capture(limit=None, wakeup=False))
        thread.start()
        dispatcher = app.events.Dispatcher(writing, hostname=hostname)
        consumer = SimpleNamespace(event_dispatcher=dispatcher)
        monkeypatch.setattr(flower_tasks, "_consumer", consumer)

        def listening() -> bool:
            dispatcher.send("task-received", uuid="probe", name="probe")
            return any(e.get("uuid") == "probe" for e in seen)

        try:
            wait_for(listening, timeout=15, interval=0.2)
            seen.clear()
            yield seen
        finally:
            receiver.should_stop = True
            thread.join(timeout=10)
            dispatcher.close()


@pytest.mark.usefixtures("services", "own_database")  # a batch lane holding only its rows
def test_every_retrieval_of_a_batch_message_is_a_row(
    queues: redis.Redis,  # noqa: F811
    events: list[dict[str, Any]],
    site: TLSSite,
) -> None:
    """One delivered batch message, five more tokens, two idle threads: the message's thread
    and the idle ones run all six retrievals (fanned out, then follow-ons); Flower's state
    from the events has one SUCCESS row per retrieval, its id in args and its outcome as
    result, the message's own row among them."""
    workspace = uuid.uuid4()
    urls = [site.page(f"/flt/{uuid.uuid4().hex}", article(f"Listed {n}")) for n in range(6)]
    ids = parked(workspace, lane="batch", urls=urls)
    queues.lpush(BATCH_QUEUE, *[f"token-{n}" for n in range(5)])
    task_id = str(uuid.uuid4())
    outcome = tasks.retrieve_next.apply(task_id=task_id).get()
    assert outcome is not None and outcome["delivery"] == "settled"
    wait_for(lambda: _settled(ids), timeout=60, interval=0.1)
    assert queues.llen(BATCH_QUEUE) == 0

    def every_row() -> EventsState | None:
        # The message's own events, as the worker sends them around the task.
        state = replay(delivered(task_id))
        for event in list(events):
            if event.get("uuid") != "probe":  # a late one of the fixture's
                state.event(event)
        end = flower_tasks.end_event(task_id, 1.0, outcome)
        state = replay([end], state)
        done = [t for t in state.tasks.values() if t.state == "SUCCESS"]
        return state if len(done) >= len(ids) else None

    state = wait_for(every_row, timeout=30, interval=0.2)
    rows = {ast.literal_eval(t.args)[0]: t for t in state.tasks.values()}  # type: ignore[attr-defined]
    assert set(rows) == set(ids), rows
    assert len(state.tasks) == len(ids)  # type: ignore[attr-defined]
    assert rows[outcome["retrieval_id"]].uuid == task_id
    for rid, task in rows.items():
        assert task.state == "SUCCESS" and task.name == RETRIEVE_NEXT_TASK
        listed = ast.literal_eval(task.result)
        assert (listed["retrieval_id"], listed["status"], listed["state"]) == (
            rid,
            "ready",
            "completed",
        )
