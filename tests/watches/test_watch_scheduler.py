"""The watch scheduler's tick against the database, on a simulated clock ahead of real time.

Each test creates its watches through the API, then ticks `worker.watches.scheduler.tick` at
instants past their slots (beat's own ticks, at real time, find none of them due). One test
lets the session's beat and worker run a watch end to end.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from tests.support.factories import make_key
from tests.watches.support import Watches


@pytest.fixture
def watches(http: object, workspace: uuid.UUID) -> Watches:
    return Watches(http, make_key([workspace]))


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _tick(now: datetime) -> Any:
    from worker.store import db
    from worker.watches import scheduler

    return db.with_transient_retry(lambda s: scheduler.tick(s, now))


def _row(table: str, row_id: Any) -> Any:
    from worker.store import db
    from worker.store.models import Retrieval, Watch

    model = {"watch": Watch, "retrieval": Retrieval}[table]
    t = model.__table__  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        return session.execute(sa.select(t).where(t.c.id == uuid.UUID(str(row_id)))).one()


def _set_watch(watch_id: str, **values: Any) -> None:
    from worker.store import db
    from worker.watches.store import WATCH

    db.with_transient_retry(
        lambda s: s.execute(
            sa.update(WATCH).where(WATCH.c.id == uuid.UUID(watch_id)).values(**values)
        )
    )


def _as_utc(value: datetime) -> datetime:
    from worker.domain import clock

    return clock.as_utc(value)


class TestTick:
    def test_a_due_watch_runs_once_in_the_batch_lane(
        self, watches: Watches, workspace: uuid.UUID
    ) -> None:
        from worker.watches import schedule

        watch = watches.create(workspace, "https://news.example.org/a", interval_seconds=300)
        slot = _instant(watch["next_run_at"])
        # Ticks are global: other tests' watches may fall due at these instants too.
        early = _tick(slot - timedelta(milliseconds=1)).created
        assert all(_row("retrieval", i).workspace_id != workspace for i in early)
        report = _tick(slot)
        (retrieval_id,) = [
            i for i in report.created if _row("retrieval", i).workspace_id == workspace
        ]
        retrieval = _row("retrieval", retrieval_id)
        assert retrieval.lane == "batch" and retrieval.state == "pending"
        assert retrieval.url == "https://news.example.org/a" and retrieval.kind == "url_text"
        assert retrieval.mutation_id == schedule.run_mutation_id(uuid.UUID(watch["id"]), slot)
        row = _row("watch", watch["id"])
        assert _as_utc(row.last_run_at) == slot and row.missed_runs == 0
        assert _as_utc(row.next_run_at) == slot + timedelta(seconds=300)
        assert row.last_retrieval_id == retrieval_id
        shown = watches.call("GET", f"/{watch['id']}").json()["watch"]
        assert shown["last_retrieval_id"] == str(retrieval_id)
        # The same instant again: nothing is due any more.
        assert all(_row("retrieval", i).workspace_id != workspace for i in _tick(slot).created)

    def test_a_repeated_run_is_a_replay(self, watches: Watches, workspace: uuid.UUID) -> None:
        """The watch's update lost (its next run put back): the same slot gives the same row."""
        watch = watches.create(workspace, "https://news.example.org/b", interval_seconds=300)
        slot = _instant(watch["next_run_at"])
        _tick(slot)
        first = _row("watch", watch["id"]).last_retrieval_id
        _set_watch(watch["id"], next_run_at=slot)
        report = _tick(slot + timedelta(seconds=10))
        assert first not in report.created and report.replayed >= 1
        assert _row("watch", watch["id"]).last_retrieval_id == first

    def test_a_late_tick_runs_once_and_counts_the_missed(
        self, watches: Watches, workspace: uuid.UUID
    ) -> None:
        watch = watches.create(workspace, "https://news.example.org/c", interval_seconds=300)
        slot = _instant(watch["next_run_at"])
        _tick(slot + timedelta(seconds=300 * 3 + 1))  # slots 0..3 passed: run slot 3, miss 3
        row = _row("watch", watch["id"])
        assert _as_utc(row.last_run_at) == slot + timedelta(seconds=900)
        assert row.missed_runs == 3
        assert watches.call("GET", f"/{watch['id']}").json()["watch"]["missed_runs"] == 3

    def test_disabled_watches_do_not_run(self, watches: Watches, workspace: uuid.UUID) -> None:
        watch = watches.create(workspace, "https://news.example.org/d", enabled=False)
        _tick(_instant(watch["next_run_at"]) + timedelta(hours=5))
        row = _row("watch", watch["id"])
        assert row.last_run_at is None and row.last_retrieval_id is None


class TestMalformed:
    def test_bad_and_over_ceiling_items_harm_no_other(
        self, http: object, watches: Watches, workspace: uuid.UUID
    ) -> None:
        """In one tick: a watch whose URL the guard refuses still becomes a retrieval (it will
        settle unsafe_url); a workspace at its open ceiling has its run refused and left due;
        a sound watch in another workspace runs."""
        from worker.lanes import quota_overrides
        from worker.store import db

        bad = watches.create(workspace, "https://news.example.org/e", interval_seconds=300)
        _set_watch(bad["id"], url="https://127.0.0.1/", next_run_at=_instant(bad["next_run_at"]))
        full_ws = uuid.uuid4()
        full = Watches(http, make_key([full_ws])).create(full_ws, "https://news.example.org/f")
        override = quota_overrides.Override(full_ws, 0, None, None)
        db.with_transient_retry(lambda s: quota_overrides.set_override(s, override, _now()))
        ok_ws = uuid.uuid4()
        ok = Watches(http, make_key([ok_ws])).create(ok_ws, "https://news.example.org/g")
        later = max(_instant(w["next_run_at"]) for w in (bad, full, ok))
        report = _tick(later)
        assert report.refused >= 1
        assert _row("retrieval", _row("watch", bad["id"]).last_retrieval_id).url == (
            "https://127.0.0.1/"
        )
        assert _row("watch", ok["id"]).last_retrieval_id in report.created
        left = _row("watch", full["id"])
        assert left.last_run_at is None and _as_utc(left.next_run_at) == _instant(
            full["next_run_at"]
        )


def _now() -> datetime:
    from worker.domain import clock

    return clock.now()


@pytest.fixture
def held_lock(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Hold one watch row locked in another transaction until the test ends (PostgreSQL)."""
    from worker.store import db

    if request.config.getoption("--db") != "postgres":
        pytest.skip("SKIP LOCKED is PostgreSQL's (SQLite has one writer)")
    release = threading.Event()
    locked = threading.Event()
    holder: list[threading.Thread] = []

    def hold(watch_id: str) -> None:
        def run() -> None:
            with db.session_scope() as session:
                session.execute(
                    sa.text("SELECT 1 FROM watch WHERE id = :id FOR UPDATE"),
                    {"id": uuid.UUID(watch_id)},
                )
                locked.set()
                release.wait(30)

        thread = threading.Thread(target=run)
        thread.start()
        holder.append(thread)
        assert locked.wait(10)

    yield hold
    release.set()
    for thread in holder:
        thread.join(10)


def test_a_locked_watch_is_skipped_not_waited_for(
    watches: Watches, workspace: uuid.UUID, held_lock: Any
) -> None:
    """Another tick holds one watch: this tick takes the others and does not wait."""
    a = watches.create(workspace, "https://news.example.org/h", interval_seconds=300)
    b = watches.create(workspace, "https://news.example.org/i", interval_seconds=300)
    held_lock(a["id"])
    later = max(_instant(a["next_run_at"]), _instant(b["next_run_at"]))
    report = _tick(later)
    assert _row("watch", b["id"]).last_retrieval_id in report.created
    assert _row("watch", a["id"]).last_run_at is None


class TestLiveness:
    def test_a_tick_shows_in_readyz_and_metrics(self, http: Any) -> None:
        from worker.jobs.watch_tasks import run_tick
        from worker.platform import redis_clients
        from worker.watches import liveness

        redis_clients.shared().delete(liveness.TICK_KEY)
        assert liveness.last_tick() is None
        run_tick()
        ready = http.get("/readyz").json()
        age = ready["checks"]["watch_scheduler"]["last_tick_age_seconds"]
        assert age is not None and 0 <= age < 60
        metrics = http.get("/metrics").text
        line = next(
            ln
            for ln in metrics.splitlines()
            if ln.startswith("evidence_watch_scheduler_last_tick_timestamp_seconds ")
        )
        assert abs(float(line.split()[1]) - _now().timestamp()) < 60


def test_beat_runs_a_due_watch_through_the_worker(
    services: Any, site: Any, watches: Watches, workspace: uuid.UUID
) -> None:
    """The session's beat sends ticks; the run is retrieved by the worker like any other."""
    from tests.support.pages import article
    from tests.support.services import wait_for

    url = site.page(f"/watched/{uuid.uuid4().hex}", article("Watched lake"))
    watch = watches.create(workspace, url, interval_seconds=300)
    _set_watch(watch["id"], next_run_at=_now() - timedelta(seconds=1))

    def settled() -> Any:
        row = _row("watch", watch["id"])
        if row.last_retrieval_id is None:
            return None
        retrieval = _row("retrieval", row.last_retrieval_id)
        return retrieval if retrieval.state == "completed" else None

    retrieval = wait_for(settled, timeout=90)
    assert retrieval.lane == "batch" and retrieval.result["status"] in ("ready", "partial")
    assert _row("watch", watch["id"]).missed_runs == 0
