"""Settles written a group per transaction (`settles.settle_many`, `settle_group`): each is fenced
exactly as alone, and writes exactly what it would have written alone."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.content.chunking import split_revision
from worker.content.results import Content, content_result
from worker.domain import clock
from worker.retrieval import claims, settle_group, settles, transitions
from worker.retrieval import records as retrievals
from worker.store import at_commit, db, retrieval_view
from worker.store.models import Evidence, EvidenceRevision, Retrieval
from worker.store.read_models import EvidenceChunk, EvidenceReport
from worker.webhooks import endpoints, signing
from worker.webhooks import records as webhooks

pytestmark = pytest.mark.lifecycle

RETRIEVAL = Retrieval.__table__  # type: ignore[attr-defined]
CHUNK = EvidenceChunk.__table__  # type: ignore[attr-defined]
REPORT = EvidenceReport.__table__  # type: ignore[attr-defined]
ITEM = Evidence.__table__  # type: ignore[attr-defined]
REVISION = EvidenceRevision.__table__  # type: ignore[attr-defined]


def _claimed(
    workspace: uuid.UUID, url: str, ttl: timedelta = timedelta(hours=1)
) -> retrievals.Claim:
    new = retrievals.NewRetrieval(workspace, uuid.uuid4(), url, "url_text", None)
    row, _ = db.with_transient_retry(
        lambda s: retrievals.create_retrieval(s, new, clock.now(), ttl)
    )
    claim = db.with_transient_retry(
        lambda s: claims.claim(s, row.id, clock.now(), timedelta(seconds=60))
    )
    assert claim is not None
    return claim


def _job(claim: retrievals.Claim, text: str) -> settles.SettleJob:
    paragraphs = "\n\n".join(f"{text} Paragraph {n} says something worth citing." for n in range(6))
    content = Content(text=paragraphs, source_url=claim.url, content_kind="document_text")
    return settles.SettleJob(claim, content_result("url_text", content, clock.now()), clock.now())


def _settle_many(jobs: list[settles.SettleJob]) -> list[bool]:
    return db.with_transient_retry(lambda s: settles.settle_many(s, jobs))


def _row(retrieval_id: uuid.UUID) -> Any:
    with db.session_scope(readonly=True) as session:
        return session.execute(
            sa.select(
                RETRIEVAL.c.state, RETRIEVAL.c.evidence_id, RETRIEVAL.c.evidence_revision
            ).where(RETRIEVAL.c.id == retrieval_id)
        ).one()


def _scalars(stmt: Any) -> list[Any]:
    with db.session_scope(readonly=True) as session:
        return list(session.execute(stmt).scalars())


def _reports(workspace: uuid.UUID) -> list[int]:
    return sorted(_scalars(sa.select(REPORT.c.report_id).where(REPORT.c.workspace_id == workspace)))


def _passages(evidence_id: uuid.UUID) -> int:
    return len(_scalars(sa.select(CHUNK.c.chunk_id).where(CHUNK.c.evidence_id == evidence_id)))


class TestSettleMany:
    def test_a_group_writes_what_single_settles_write(self) -> None:
        """Five claims in one transaction: each completed with its own revision, passages and
        report id, exactly like a claim settled alone beside them."""
        workspace = uuid.uuid4()
        claims = [_claimed(workspace, f"https://example.org/group/{n}") for n in range(5)]
        jobs = [_job(c, f"Page {n}." * (n + 1) * 40) for n, c in enumerate(claims)]
        assert _settle_many(jobs) == [True] * 5
        alone = _job(_claimed(workspace, "https://example.org/alone"), "Alone.")
        assert transitions.settle_claim(alone.claim, alone.result, alone.now)
        items = set()
        for job in [*jobs, alone]:
            state, evidence_id, revision = _row(job.claim.retrieval_id)
            assert (state, revision) == ("completed", 1) and evidence_id is not None
            passages = split_revision(job.result["text"], [])
            assert _passages(evidence_id) == len(passages) > 0
            items.add(evidence_id)
        assert len(items) == 6 and _reports(workspace) == [1, 2, 3, 4, 5, 6]

    def test_a_lost_claim_writes_nothing_and_the_others_settle(self) -> None:
        """One claim of the group was cancelled, one is past valid_until: both write nothing;
        the other two settle."""
        workspace = uuid.uuid4()
        kept = [_claimed(workspace, f"https://example.org/kept/{n}") for n in range(2)]
        cancelled = _claimed(workspace, "https://example.org/cancelled")
        late = _claimed(workspace, "https://example.org/late", ttl=timedelta(seconds=1))

        def cancel(session: Any) -> None:
            row = retrieval_view.get_retrieval(session, cancelled.retrieval_id)
            assert row is not None and transitions.cancel(session, row, clock.now()) is not None

        db.with_transient_retry(cancel)
        jobs = [_job(c, "Text.") for c in (kept[0], cancelled, late, kept[1])]
        jobs[2].now = clock.now() + timedelta(seconds=5)  # settling after its valid_until
        assert _settle_many(jobs) == [True, False, False, True]
        assert _row(cancelled.retrieval_id)[:2] == ("cancelled", None)
        assert _row(late.retrieval_id) == ("running", None, None)
        assert [_row(c.retrieval_id)[0] for c in kept] == ["completed", "completed"]
        assert _reports(workspace) == [1, 2]

    def test_a_zombie_and_its_successor_in_one_group(self) -> None:
        """Two settles of one row (a stale attempt and the current one): only the current wins."""
        claim = _claimed(uuid.uuid4(), "https://example.org/zombie")
        stale = dataclasses.replace(claim, attempt=claim.attempt - 1)
        assert _settle_many([_job(stale, "Zombie."), _job(claim, "Current.")]) == [False, True]
        assert _settle_many([_job(claim, "Again.")]) == [False]  # settled already
        assert _row(claim.retrieval_id)[0] == "completed"

    def test_identical_content_in_one_group_is_one_revision(self) -> None:
        """Two retrievals of one page with the same content name the same revision."""
        workspace = uuid.uuid4()
        first, second = (_claimed(workspace, "https://example.org/same") for _ in range(2))
        assert _settle_many([_job(first, "Same."), _job(second, "Same.")]) == [True, True]
        assert _row(first.retrieval_id)[1:] == _row(second.retrieval_id)[1:]
        assert _reports(workspace) == [1]
        changed = _claimed(workspace, "https://example.org/same")
        assert _settle_many([_job(changed, "Changed.")]) == [True]
        assert _row(changed.retrieval_id)[2] == 2

    def test_reports_of_several_workspaces_are_numbered_each_from_one(self) -> None:
        """New items of two workspaces and one already numbered, in one transaction."""
        one, two = uuid.uuid4(), uuid.uuid4()
        known = _claimed(one, "https://example.org/known")
        assert _settle_many([_job(known, "Known.")]) == [True]
        again = _claimed(one, "https://example.org/known")
        claims = [
            again,
            *(_claimed(w, f"https://example.org/{w}/{n}") for w in (one, two) for n in range(3)),
        ]
        assert _settle_many([_job(c, f"Text {n}.") for n, c in enumerate(claims)]) == [True] * 7
        assert _reports(one) == [1, 2, 3, 4] and _reports(two) == [1, 2, 3]

    def test_rows_queued_for_commit_are_dropped_on_rollback(self) -> None:
        """Rows queued in a transaction that rolls back are not written by the session's next
        commit; a failed settle group leaves its rows as they were."""
        claim = _claimed(uuid.uuid4(), "https://example.org/rolled-back")
        cancel = (
            sa.update(RETRIEVAL)
            .where(RETRIEVAL.c.id == sa.bindparam("b_id"))
            .values(state="cancelled")
        )
        with Session(db.get_engine()) as session:
            session.begin()
            at_commit.add_rows(session, cancel, [{"b_id": claim.retrieval_id}])
            session.rollback()  # the queued row goes with the transaction
            session.begin()
            session.commit()  # would write it, had the rollback not dropped it
        assert _row(claim.retrieval_id)[0] == "running"

        job = _job(claim, "Rolled back.")

        def fail(session: Any) -> None:
            settles.settle_many(session, [job])
            raise RuntimeError("after the settle, before the commit")

        with pytest.raises(RuntimeError):
            db.with_transient_retry(fail)
        assert _row(claim.retrieval_id) == ("running", None, None)
        assert _settle_many([job]) == [True]


class TestSettleGroup:
    def test_threads_settle_in_groups(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """24 threads settling at once: every one settled, in fewer transactions than settles."""
        workspace = uuid.uuid4()
        claims = [_claimed(workspace, f"https://example.org/threads/{n}") for n in range(24)]
        sizes: list[int] = []
        real = settles.settle_many

        def counting(session: Any, jobs: Any) -> list[bool]:
            if not sizes:  # the first group: let every other thread queue its settle meanwhile
                deadline = time.monotonic() + 10
                while group.queued() < len(claims) - len(jobs) and time.monotonic() < deadline:
                    time.sleep(0.01)
            sizes.append(len(jobs))
            return real(session, jobs)

        monkeypatch.setattr(settle_group, "settle_many", counting)
        group = settle_group.group(max_group=8)
        start = threading.Barrier(len(claims))
        won: dict[uuid.UUID, bool] = {}

        def settle(claim: retrievals.Claim) -> None:
            start.wait()
            won[claim.retrieval_id] = group.submit(_job(claim, f"Thread {claim.url}."))

        threads = [threading.Thread(target=settle, args=(c,)) for c in claims]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert won == {c.retrieval_id: True for c in claims}
        rest = 24 - sizes[0]  # queued while the first group was written: taken 8 at a time
        assert sizes[1:] == [8] * (rest // 8) + ([rest % 8] if rest % 8 else [])
        assert _reports(workspace) == list(range(1, 25))

    def test_a_bad_outcome_fails_only_its_own_settle(self) -> None:
        """An outcome that cannot be written (no provenance) fails its group's transaction; the
        group is written again one by one, so only that settle raises and the others complete."""
        workspace = uuid.uuid4()
        claims = [_claimed(workspace, f"https://example.org/poison/{n}") for n in range(3)]
        jobs = [_job(c, f"Fine {n}.") for n, c in enumerate(claims)]
        jobs[1].result = {**jobs[1].result, "provenance": {}}  # type: ignore[typeddict-item]
        answers = settle_group.write(jobs)
        assert answers[0] is True and answers[2] is True
        assert isinstance(answers[1], KeyError)
        assert [_row(c.retrieval_id)[0] for c in claims] == ["completed", "running", "completed"]

    def test_a_group_raises_in_the_thread_whose_settle_failed(self) -> None:
        """Through the group, the bad settle's own thread gets its error; the other's answer."""
        workspace = uuid.uuid4()
        good, bad = (
            _job(_claimed(workspace, f"https://example.org/own/{n}"), "Own.") for n in range(2)
        )
        bad.result = {**bad.result, "provenance": {}}  # type: ignore[typeddict-item]
        group = settle_group.group()
        assert group.submit(good) is True
        with pytest.raises(KeyError):
            group.submit(bad)
        assert group.queued() == 0

    def test_a_late_settle_in_a_group_is_expired(self) -> None:
        """A settle past valid_until loses, and is expired as after a single fenced settle."""
        claim = _claimed(uuid.uuid4(), "https://example.org/too-late", ttl=timedelta(seconds=1))
        job = _job(claim, "Too late.")
        job.now = clock.now() + timedelta(seconds=5)
        db.with_transient_retry(
            lambda s: s.execute(
                sa.update(RETRIEVAL)
                .where(RETRIEVAL.c.id == claim.retrieval_id)
                .values(valid_until=clock.now() - timedelta(seconds=1))
            )
        )
        assert settle_group.group().submit(job) is False
        assert _row(claim.retrieval_id) == ("expired", None, None)


@pytest.fixture
def endpoint() -> Iterator[tuple[uuid.UUID, uuid.UUID]]:
    """A workspace with an endpoint subscribed to settles: (workspace, endpoint id). Its URL
    is never reachable (a worker that takes a delivery fails it), and it goes with the test."""
    workspace = uuid.uuid4()
    row = db.with_transient_retry(
        lambda s: endpoints.insert_endpoint(
            s,
            workspace,
            "https://hooks.invalid/settled",
            [webhooks.RETRIEVAL_SETTLED],
            None,
            signing.new_secret(),
            clock.now(),
        )
    )
    yield workspace, row.id
    db.with_transient_retry(lambda s: endpoints.delete_endpoint(s, row.id))


def _deliveries(endpoint_id: uuid.UUID) -> list[uuid.UUID]:
    """The retrievals the endpoint has a delivery row for (one per row, sorted), as committed
    (read in a transaction of its own)."""
    stmt = sa.select(webhooks.DELIVERY.c.retrieval_id).where(
        webhooks.DELIVERY.c.endpoint_id == endpoint_id
    )
    return sorted(_scalars(stmt))


def _settle_alone_in(session: Session, job: settles.SettleJob) -> None:
    transitions.settle(session, job.claim, job.result, job.now)


def _settle_group_in(session: Session, job: settles.SettleJob) -> None:
    assert settles.settle_many(session, [job]) == [True]


SETTLES: dict[str, Callable[[Session, settles.SettleJob], None]] = {
    "grouped": _settle_group_in,
    "alone": _settle_alone_in,
}


class TestDeliveries:
    """A settle's webhook delivery is written in the settle's own transaction, grouped or not."""

    def test_a_group_records_a_delivery_for_each_settle_it_wins(
        self, endpoint: tuple[uuid.UUID, uuid.UUID]
    ) -> None:
        """Three claims and a zombie of one in a group: a delivery for each of the three, and
        none twice; through the settle group too."""
        workspace, endpoint_id = endpoint
        claims = [_claimed(workspace, f"https://example.org/hooked/{n}") for n in range(3)]
        zombie = dataclasses.replace(claims[2], attempt=claims[2].attempt - 1)
        jobs = [_job(c, f"Hooked {n}.") for n, c in enumerate([claims[0], zombie, *claims[1:]])]
        assert _settle_many(jobs) == [True, False, True, True]
        assert _deliveries(endpoint_id) == sorted(c.retrieval_id for c in claims)
        grouped = [_claimed(workspace, f"https://example.org/hooked/g{n}") for n in range(2)]
        assert settle_group.write([_job(c, "Grouped.") for c in grouped]) == [True, True]
        assert _deliveries(endpoint_id) == sorted(c.retrieval_id for c in [*claims, *grouped])

    @pytest.mark.parametrize("how", list(SETTLES))
    def test_the_delivery_exists_exactly_when_the_settle_commits(
        self, endpoint: tuple[uuid.UUID, uuid.UUID], how: str
    ) -> None:
        """Inside the settle's transaction the delivery is not committed before the outcome is
        (another connection sees neither); a transaction that fails after the settle leaves
        neither behind; once it commits, both are there, the delivery once."""
        workspace, endpoint_id = endpoint
        claim = _claimed(workspace, f"https://example.org/atomic/{how}")
        job = _job(claim, "Atomic.")
        seen_inside: list[list[uuid.UUID]] = []

        def fail(session: Any) -> None:
            SETTLES[how](session, job)
            seen_inside.append(_deliveries(endpoint_id))
            raise RuntimeError("after the settle, before the commit")

        with pytest.raises(RuntimeError):
            db.with_transient_retry(fail)
        assert seen_inside == [[]]
        assert _row(claim.retrieval_id) == ("running", None, None)
        assert _deliveries(endpoint_id) == []
        db.with_transient_retry(lambda s: SETTLES[how](s, job))
        assert _row(claim.retrieval_id)[0] == "completed"
        assert _deliveries(endpoint_id) == [claim.retrieval_id]
