"""`worker.platform.confine` and the paths that confine one item's failure without a database:
a batch thread's follow-ons, and a webhook attempt's outcome."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.exc import DataError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from worker.platform import confine


def _dbapi(kind: type[Exception], invalidated: bool = False) -> Exception:
    error = kind("SELECT 1", {}, Exception("boom"), connection_invalidated=invalidated)  # type: ignore[call-arg]
    return error


class TestGroupWide:
    def test_the_database_itself_is_no_items(self) -> None:
        assert confine.group_wide(_dbapi(OperationalError))
        assert confine.group_wide(_dbapi(DataError, invalidated=True))
        assert confine.group_wide(PoolTimeout("no connection"))

    @pytest.mark.parametrize(
        "error",
        [
            ValueError("port"),
            KeyError("x"),
            RuntimeError(),
            _dbapi(DataError),
            _dbapi(IntegrityError),
        ],
    )
    def test_anything_else_is_one_items(self, error: Exception) -> None:
        assert not confine.group_wide(error)


class TestEachAlone:
    @settings(max_examples=50, deadline=None)
    @given(st.lists(st.tuples(st.integers(), st.booleans()), max_size=20))
    def test_every_item_is_done_and_only_the_failing_ones_returned(
        self, items: list[tuple[int, bool]]
    ) -> None:
        done: list[int] = []

        def work(item: tuple[int, bool]) -> None:
            if item[1]:
                raise ValueError(f"item {item[0]}")
            done.append(item[0])

        failed = confine.each_alone("sweep", items, work, lambda i: {"item": i[0]})
        assert failed == [i for i in items if i[1]]
        assert done == [i[0] for i in items if not i[1]]

    def test_a_group_wide_error_is_raised(self) -> None:
        def work(_: int) -> None:
            raise _dbapi(OperationalError)

        with pytest.raises(OperationalError):
            confine.each_alone("sweep", [1, 2], work, lambda i: {})


class TestCounts:
    def test_recorded_in_the_process_and_for_the_fleet(self) -> None:
        before = confine.FAILURES.labels("claim", "nothing_found")._value.get()
        fleet = (confine.read() or {}).get(("claim", "nothing_found"), 0)
        confine.record("claim", "nothing_found", ValueError("x"), retrieval_id="r")
        assert confine.FAILURES.labels("claim", "nothing_found")._value.get() == before + 1
        assert (confine.read() or {})[("claim", "nothing_found")] == fleet + 1


class TestFollowOns:
    def test_a_failing_follow_on_ends_neither_the_thread_nor_the_others(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The second of four follow-on claims raises: the third and fourth still run."""
        from worker.jobs import batch_tokens, spare_tokens

        answers: list[Any] = [{"n": 0}, {"n": 1}, RuntimeError("claim"), {"n": 3}, {"n": 4}]

        def next_batch() -> Any:
            answer = answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer

        monkeypatch.setattr(batch_tokens, "_run_next_batch", next_batch)
        monkeypatch.setattr(spare_tokens, "take", lambda: bool(answers))
        outcome = batch_tokens._run_with_follow_ons()
        assert outcome is not None
        assert outcome["n"] == 0
        assert outcome["then"] == [
            {"n": 1},
            {"delivery": "failed", "error": "RuntimeError"},
            {"n": 3},
            {"n": 4},
        ]


class TestWebhookOutcome:
    def test_an_error_the_database_refuses_is_recorded_without_its_text(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A failed attempt whose error text cannot be stored (a NUL from the receiver) is
        recorded all the same, without the text: it backs off like any other."""
        from worker.webhooks import delivery as webhooks
        from worker.webhooks import records as store
        from worker.webhooks.sender import SendResult

        written: list[tuple[int | None, str]] = []

        def failed_attempt(_s: Any, _a: Any, status: int | None, error: str, *_: Any) -> Any:
            if "\x00" in error:
                raise _dbapi(DataError)
            written.append((status, error))
            return store.FailureOutcome(recorded=True, final=False, disabled=False)

        monkeypatch.setattr(webhooks.db, "with_transient_retry", lambda fn: fn(None))
        monkeypatch.setattr(store, "failed_attempt", failed_attempt)
        now = datetime.now(UTC)
        attempt = store.Attempt(
            uuid.uuid4(),
            1,
            uuid.uuid4(),
            uuid.uuid4(),
            "retrieval.settled",
            now,
            "https://example.org/hook",
            "secret",
            None,
            None,
        )
        outcome = webhooks.record(attempt, SendResult(False, 500, "\x00boom\x00", 0.1, "http_5xx"))
        assert outcome["outcome"] in ("retrying", "failed")
        assert written == [(None, "the attempt's error could not be recorded (DataError)")]
