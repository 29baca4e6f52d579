"""A failure about one item is confined to it in every grouped path (`worker.platform.confine`).

Each grouped path's own function, in this process, on a database of the test's own (run on
PostgreSQL and SQLite): the claim group (`claim_group.take`), the grouped settle
(`settle_group.write`), the sweep (`sweep.run_sweep`) and one retrieval's run
(`runner.run_claim`). Hypothesis feeds them malformed items (URLs no parser reads, odd
languages) and injects an exception about chosen items; the well-formed items' outcomes must be
what they would be without them, and no row is left open for good.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from worker.content.results import Content, content_result, failure_result
from worker.domain import clock
from worker.domain.reasons import Reason
from worker.jobs import sweep
from worker.lanes import batch_order
from worker.platform.settings import get_settings
from worker.retrieval import claim_group, claims, settle_group, transitions
from worker.retrieval import records as retrievals
from worker.retrieval import run as runner
from worker.retrieval.freshness import revalidation as freshness
from worker.retrieval.freshness import sources
from worker.retrieval.freshness.conditional import RecordingFetcher
from worker.retrieval.settles import SettleJob
from worker.store import db

pytestmark = pytest.mark.lifecycle

T = retrievals.RETRIEVAL.c
LEASE = timedelta(seconds=60)
#: A well-formed request whose source is stored: its look-up finds that revision.
KNOWN = "https://example.org/known"
#: URLs accepted before the API parsed them by the WHATWG rules (the issue's five first).
LEGACY_URLS = [
    "https://::1/",
    "https://93.184.215.14:443:22/",
    "https://93.184.215.14:99999/",
    "https://127.0.0.1:+443/",
    "https://93.184.215.14:443abc/",
    "https://[::1/",
    "https://exa mple.org/",
    "ht!tp://x",
    "",
    "https://%zz/",
    "https://example.org:0x1bb/",
]
EXAMPLES = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: Exceptions a chosen item's work raises (none of them about the database as a whole).
INJECTED = [RuntimeError, ValueError, KeyError, TypeError, ZeroDivisionError, AttributeError]


def _text(postgres: bool, max_size: int) -> st.SearchStrategy[str]:
    # Text a database holds: UTF-8 (no lone surrogates), and no NUL in PostgreSQL's.
    alphabet = st.characters(codec="utf-8", exclude_characters="\x00" if postgres else "")
    return st.text(alphabet, max_size=max_size)


def _postgres() -> bool:
    return db.get_engine().dialect.name == db.POSTGRESQL


def _item(postgres: bool) -> st.SearchStrategy[tuple[str, str, type[BaseException] | None]]:
    """A malformed item: (URL, language, the exception its work raises or None)."""
    return st.tuples(
        st.one_of(st.sampled_from(LEGACY_URLS), _text(postgres, 200)),
        _text(postgres, 35),
        st.one_of(st.none(), st.sampled_from(INJECTED)),
    )


def _insert(
    workspace: uuid.UUID,
    items: list[tuple[str, str]],
    lane: str = "batch",
    now: datetime | None = None,
) -> list[uuid.UUID]:
    """Rows recorded as a version that checked nothing would have (no API: legacy rows), in
    order, one microsecond apart."""
    now = now or clock.now()
    rows = []
    for n, (url, language) in enumerate(items):
        new = retrievals.NewRetrieval(workspace, uuid.uuid4(), url, "url_text", None)
        values = retrievals.new_row_values(
            new, now + timedelta(microseconds=n), timedelta(hours=1), lane
        )
        rows.append({**values, "language": language})

    def write(session: Session) -> None:
        session.execute(sa.insert(retrievals.RETRIEVAL), rows)
        batch_order.note_batch_work(session, [workspace])

    db.with_transient_retry(write)
    return [row["id"] for row in rows]


def _states(ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int, Any]]:
    with db.session_scope(readonly=True) as session:
        rows = session.execute(
            sa.select(T.id, T.state, T.attempt, T.result).where(T.id.in_(ids))
        ).all()
    return {row.id: (row.state, row.attempt, row.result) for row in rows}


def _out_of_the_way(ids: list[uuid.UUID]) -> None:
    """Rows an example left open, cancelled: the next example's claims take only its own."""
    db.with_transient_retry(
        lambda s: s.execute(
            sa.update(retrievals.RETRIEVAL)
            .where(T.id.in_(ids), T.state.in_(["pending", "running"]))
            .values(state="cancelled")
        )
    )


def _page(url: str, text: str) -> Content:
    body = "\n\n".join(f"{text} Paragraph {n} says something worth citing." for n in range(4))
    return Content(text=body, source_url=url, content_kind="document_text")


def _store_known(workspace: uuid.UUID) -> uuid.UUID:
    """Settle one retrieval of KNOWN with content and remember it: the evidence id."""
    [rid] = _insert(workspace, [(KNOWN, "")], lane="interactive")
    claim = db.with_transient_retry(lambda s: claims.claim(s, rid, clock.now(), LEASE))
    assert claim is not None
    now = clock.now()
    result = content_result("url_text", _page(KNOWN, "Known."), now)
    plan = freshness.Plan(RecordingFetcher(None))  # type: ignore[arg-type]
    then = freshness.remember(claim, plan, result, now)
    assert transitions.settle_claim(claim, result, now, then=then)
    with db.session_scope(readonly=True) as session:
        evidence_id = session.execute(sa.select(T.evidence_id).where(T.id == rid)).scalar_one()
    assert evidence_id is not None
    return evidence_id  # type: ignore[no-any-return]


@contextlib.contextmanager
def _failing_look_ups(failing: dict[str, type[BaseException]], in_sql: bool) -> Iterator[None]:
    """The look-up of a request whose URL is in `failing` raises its exception: in Python, or
    (`in_sql`, PostgreSQL) as a statement the server refuses, which aborts the transaction."""

    def fail(session: Session, urls: list[str]) -> None:
        for url in urls:
            if url in failing:
                if in_sql:
                    session.execute(sa.text("SELECT 1/0"))
                raise failing[url](f"injected for {url!r}")

    real_find, real_find_many = sources.find, sources.find_many

    def find(session: Session, rid: Any, ws: Any, kind: str, url: str, lang: Any) -> Any:
        fail(session, [url])
        return real_find(session, rid, ws, kind, url, lang)

    def find_many(session: Session, wanted: list[Any]) -> Any:
        fail(session, [item[3] for item in wanted])
        return real_find_many(session, wanted)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sources, "find", find)
        patch.setattr(sources, "find_many", find_many)
        yield


class TestClaimGroup:
    def test_one_claims_failing_look_up_is_its_own(self, engine: sa.Engine) -> None:
        """Well-formed and malformed batch items claimed together; the look-ups of chosen
        malformed items raise. Every row is claimed (none left pending, each on attempt 1),
        each well-formed item's look-up finds the stored revision as if alone, and a failing
        item finds nothing."""
        postgres = _postgres()
        workspace = uuid.uuid4()
        known = _store_known(workspace)

        @EXAMPLES
        @given(
            good=st.integers(1, 8),
            bad=st.lists(_item(postgres), min_size=1, max_size=5),
            at=st.randoms(use_true_random=False),
            in_sql=st.booleans(),
        )
        def check(good: int, bad: list[Any], at: Any, in_sql: bool) -> None:
            # Unique URLs for the injected items: the injection goes by URL.
            bad = [
                (f"{url}#{n}" if fails else url, lang, fails)
                for n, (url, lang, fails) in enumerate(bad)
            ]
            items: list[tuple[str, str, Any]] = [(KNOWN, "", None)] * good + bad
            at.shuffle(items)
            ids = _insert(workspace, [(url, lang) for url, lang, _ in items])
            failing = {url: fails for url, _, fails in items if fails is not None}
            with _failing_look_ups(failing, in_sql and postgres):
                answers = claim_group.take([None] * (len(items) + 2))
            claimed = {a[0].retrieval_id: a for a in answers if isinstance(a, tuple)}
            assert answers[len(items) :] == [None, None]
            assert set(claimed) == set(ids)
            for rid, (url, _lang, fails) in zip(ids, items, strict=True):
                claim, (max_age, stored) = claimed[rid]
                assert claim.url == url and claim.attempt == 1
                if url == KNOWN:
                    assert stored is not None and stored.evidence_id == known
                elif fails is not None:
                    assert (max_age, stored) == (None, None)
            assert {state for state, _, _ in _states(ids).values()} == {"running"}

        check()


class TestSettleGroup:
    def test_one_bad_settle_fails_only_itself(self, engine: sa.Engine) -> None:
        """A group of settles: well-formed pages, malformed URLs settled blocked/unsafe_url,
        and chosen ones whose settle raises. Every other settle is written as alone; a failed
        one stays running until its claim is given back, then pending (attempt 1 of 2)."""
        postgres = _postgres()
        workspace = uuid.uuid4()

        @EXAMPLES
        @given(
            good=st.integers(0, 6),
            bad=st.lists(_item(postgres), min_size=1, max_size=5),
            at=st.randoms(use_true_random=False),
        )
        def check(good: int, bad: list[Any], at: Any) -> None:
            items: list[tuple[str, str, Any]] = [
                (f"https://example.org/settle/{uuid.uuid4()}", "", None) for _ in range(good)
            ] + bad
            at.shuffle(items)
            ids = _insert(workspace, [(url, lang) for url, lang, _ in items])
            taken = db.with_transient_retry(
                lambda s: claims.claim_next_batches(s, clock.now(), LEASE, len(items))
            )
            by_id = {c.retrieval_id: c for c in taken}
            assert set(by_id) == set(ids)
            jobs = []
            for rid, (url, _lang, fails) in zip(ids, items, strict=True):
                now = clock.now()
                if url.startswith("https://example.org/settle/"):
                    result = content_result("url_text", _page(url, f"Page {rid}."), now)
                else:
                    result = failure_result("url_text", Reason.UNSAFE_URL, now)
                job = SettleJob(by_id[rid], result, now)
                if fails is not None:
                    job.then = _raising(fails)
                jobs.append(job)
            answers = settle_group.write(jobs)
            for job, answer, (_url, _lang, fails) in zip(jobs, answers, items, strict=True):
                if fails is not None:
                    assert isinstance(answer, fails)
                    assert runner.give_back(job.claim, answer)["state"] == "pending"
                else:
                    assert answer is True
            states = _states(ids)
            for job, (_url, _lang, fails) in zip(jobs, items, strict=True):
                state, attempt, result = states[job.claim.retrieval_id]
                if fails is not None:
                    assert (state, attempt, result) == ("pending", 1, None)
                    continue
                assert state == "completed"
                assert result["status"] == job.result["status"]
            _out_of_the_way(ids)

        check()


def _raising(kind: type[BaseException]) -> Any:
    def then(*_: Any) -> None:
        raise kind("injected")

    return then


class TestSweep:
    def test_one_rows_failure_leaves_the_others_swept(
        self, engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Rows past valid_until, and running rows whose lease ran out on their first or
        last attempt, some with malformed URLs and languages; writing chosen rows' outcome
        raises. Every other row is expired, re-pended or unconfirmed as if they were absent."""
        from worker.jobs import outbox
        from worker.webhooks import records as webhooks

        postgres = _postgres()
        max_attempts = get_settings().max_attempts
        # The sweep's publishing is the broker's: here it only records what it would send.
        monkeypatch.setattr(outbox, "queue_lengths", lambda queues: dict.fromkeys(queues, 0))
        monkeypatch.setattr(outbox, "publish", lambda ids, lane="interactive": list(ids))
        failing: set[uuid.UUID] = set()
        real_record = webhooks.record_settled

        def record_settled(session: Session, ids: Any, now: datetime, *args: Any) -> Any:
            if failing & set(ids):
                raise RuntimeError("injected")
            return real_record(session, ids, now, *args)

        monkeypatch.setattr(webhooks, "record_settled", record_settled)

        @EXAMPLES
        @given(
            rows=st.lists(
                st.tuples(
                    st.sampled_from(["expire", "rescue", "give_up"]),
                    st.one_of(
                        st.just("https://example.org/swept"), _item(postgres).map(lambda i: i[0])
                    ),
                    _text(postgres, 35),
                    st.booleans(),
                ),
                min_size=1,
                max_size=10,
            )
        )
        def check(rows: list[tuple[str, str, str, bool]]) -> None:
            workspace = uuid.uuid4()
            now = clock.now()
            ids = _insert(workspace, [(url, lang) for _, url, lang, _ in rows], now=now)
            failing.clear()
            failing.update(rid for rid, row in zip(ids, rows, strict=True) if row[3])

            def age(session: Session) -> None:
                for rid, (how, *_rest) in zip(ids, rows, strict=True):
                    values: dict[str, Any]
                    if how == "expire":
                        values = {"valid_until": now - timedelta(seconds=1)}
                    else:
                        attempt = 1 if how == "rescue" else max_attempts
                        values = {
                            "state": "running",
                            "attempt": attempt,
                            "lease_until": now - timedelta(seconds=1),
                        }
                    session.execute(
                        sa.update(retrievals.RETRIEVAL).where(T.id == rid).values(values)
                    )

            db.with_transient_retry(age)
            sweep.run_sweep(now)
            states = _states(ids)
            expected = {"expire": "expired", "rescue": "pending", "give_up": "unconfirmed"}
            for rid, (how, _url, _lang, fails) in zip(ids, rows, strict=True):
                state = states[rid][0]
                if fails and how != "rescue":  # its outcome could not be written: as it was
                    assert state == ("pending" if how == "expire" else "running")
                else:
                    assert state == expected[how], (how, state)
            _out_of_the_way(ids)

        check()


class TestSingles:
    def test_a_failing_look_up_still_claims(self, engine: sa.Engine) -> None:
        """The claim's look-up raises: the row is claimed all the same (its attempts count),
        finding nothing, rather than left pending to fail the same way for ever."""
        [rid] = _insert(uuid.uuid4(), [(LEGACY_URLS[0], "")], lane="interactive")
        with _failing_look_ups({LEGACY_URLS[0]: RuntimeError}, in_sql=_postgres()):
            claimed = runner._claim_looking_up(lambda s: claims.claim(s, rid, clock.now(), LEASE))
        assert claimed is not None
        claim, found = claimed
        assert (claim.attempt, found) == (1, (None, None))
        assert _states([rid])[rid][:2] == ("running", 1)

    def test_a_run_that_always_raises_ends_unconfirmed(
        self, engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A retrieval whose run raises every time: given back to pending after its first
        attempt, `unconfirmed` after its last; never left running."""
        assert get_settings().max_attempts == 2

        def prepare(*_: Any) -> Any:
            raise RuntimeError("the same every time")

        monkeypatch.setattr(freshness, "prepare", prepare)
        [rid] = _insert(uuid.uuid4(), [("https://example.org/poison", "")], lane="interactive")
        outcomes = []
        for _ in range(2):
            claim = db.with_transient_retry(lambda s: claims.claim(s, rid, clock.now(), LEASE))
            assert claim is not None
            outcomes.append(runner.run_claim(claim, (None, None)))
        assert [(o["delivery"], o["state"], o["attempt"]) for o in outcomes] == [
            ("failed", "pending", 1),
            ("failed", "unconfirmed", 2),
        ]
        state, attempt, _ = _states([rid])[rid]
        assert (state, attempt) == ("unconfirmed", 2)
