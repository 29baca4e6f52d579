"""Answers about an open retrieval say when to ask again (`Retry-After`); settled ones do not."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from api.services import retrievals as retrieval_service
from tests.support.factories import Api, body
from tests.support.pages import article, slow
from tests.support.tls_site import TLSSite

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]

#: The session's retrieval worker runs this many processes (tests/conftest.py).
WORKER_PROCESSES = 2


@pytest.fixture
def page(site: TLSSite) -> str:
    path = f"/advice/{uuid.uuid4().hex}"
    return site.page(path, article("Poll advice", marker=path))


@pytest.fixture
def slow_page(site: TLSSite) -> str:
    site.add("/advice/slow", slow)
    return site.url("/advice/slow?s=3")


def retry_after(response: object) -> str | None:
    return response.headers.get("Retry-After")  # type: ignore[attr-defined]


class TestRetryAfter:
    """Pending and running retrievals carry Retry-After; settled ones never do."""

    def test_pending_running_and_settled(
        self, api: Api, page: str, slow_page: str, workspace: uuid.UUID
    ) -> None:
        """Pending: at least 1 s from the backlog; running: 1 s; settled: no header."""
        busy = [
            api.post(body(slow_page, workspace)).json()["retrieval"]["id"]
            for _ in range(WORKER_PROCESSES)
        ]
        for retrieval_id in busy:  # both worker processes are now busy for ~3 s
            api.wait(retrieval_id, states={"running"}, timeout=15)
        created = api.post(body(page, workspace))
        assert created.status_code == 202
        assert created.json()["retrieval"]["state"] == "pending"
        assert int(retry_after(created) or 0) >= 1
        polled = api.get(created.json()["retrieval"]["id"])
        assert polled.json()["retrieval"]["state"] == "pending"
        assert int(retry_after(polled) or 0) >= 1
        running = api.get(busy[0])
        assert running.json()["retrieval"]["state"] == "running"
        assert retry_after(running) == "1"
        done = api.wait(created.json()["retrieval"]["id"])
        assert done["state"] == "completed"
        assert retry_after(api.get(done["id"])) is None

    def test_replay_and_cancel_of_settled_have_none(
        self, api: Api, page: str, workspace: uuid.UUID
    ) -> None:
        """A replayed POST or a cancel answering a settled retrieval carries no Retry-After."""
        payload = body(page, workspace)
        done = api.wait(api.post(payload).json()["retrieval"]["id"])
        replay = api.post(payload)
        assert replay.status_code == 200 and retry_after(replay) is None
        cancel = api.cancel(done["id"])
        assert cancel.json()["retrieval"] == done and retry_after(cancel) is None

    def test_grows_with_the_backlog(
        self, api: Api, page: str, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The advice for a pending retrieval is the backlog over the poll budget, capped."""
        from worker.domain import clock
        from worker.retrieval import records as retrievals
        from worker.store import db

        new = retrievals.NewRetrieval(workspace, uuid.uuid4(), page, "url_text", None)
        row, _ = db.with_transient_retry(
            lambda s: retrievals.create_retrieval(s, new, clock.now(), timedelta(hours=1))
        )  # recorded, never published: pending until the sweep republishes it
        for pending, low, high in ((2_500, 50, 120), (10**7, 120, 120)):
            monkeypatch.setattr(
                retrieval_service, "_count_open", lambda n=pending: ({"interactive": n}, {})
            )
            retrieval_service.backlog.clear()
            polled = api.get(str(row.id))
            assert polled.json()["retrieval"]["state"] == "pending"
            assert low <= int(retry_after(polled) or 0) <= high
        retrieval_service.backlog.clear()

    def test_follows_the_lane_of_the_retrieval(
        self, api: Api, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A deep batch backlog does not lengthen the advice for an interactive retrieval (it
        does not wait behind it); a batch retrieval's advice follows the batch backlog."""
        import sqlalchemy as sa

        from tests.support.factories import parked
        from worker.store import db
        from worker.store.models import Retrieval

        interactive, batch = parked(workspace, 2)
        T = Retrieval.__table__.c  # type: ignore[attr-defined]
        db.with_transient_retry(
            lambda s: s.execute(
                sa.update(Retrieval).where(T.id == uuid.UUID(batch)).values(lane="batch")
            )
        )
        deep = {"interactive": 3, "batch": 10**6}
        monkeypatch.setattr(retrieval_service, "_count_open", lambda: (deep, {}))
        retrieval_service.backlog.clear()
        assert retry_after(api.get(interactive)) == "1"
        assert retry_after(api.get(batch)) == "120"
        assert retrieval_service.backlog.pending() == 10**6 + 3
        retrieval_service.backlog.clear()


class TestRunningAdvice:
    """A running retrieval's advice follows how many of its own workspace's run at once."""

    def test_many_running_in_one_workspace_do_not_lengthen_anothers(
        self, api: Api, workspace: uuid.UUID
    ) -> None:
        import sqlalchemy as sa

        from tests.support.factories import cancel_open, make_key, parked
        from worker.store import db
        from worker.store.models import Retrieval

        busy, agent = workspace, uuid.uuid4()
        ids = [uuid.UUID(i) for i in parked(busy, 200) + parked(agent, 1)]
        T = Retrieval.__table__.c  # type: ignore[attr-defined]
        db.with_transient_retry(
            lambda s: s.execute(sa.update(Retrieval).where(T.id.in_(ids)).values(state="running"))
        )
        try:
            retrieval_service.backlog.clear()  # counted afresh
            # 200 running: 8 s, within the jitter's ±50 %.
            assert 4 <= int(retry_after(api.get(str(ids[0]))) or 0) <= 12
            agents = Api(api.client, make_key([agent]))
            assert retry_after(agents.get(str(ids[-1]))) == "1"  # its only one
        finally:
            cancel_open(agent)
            retrieval_service.backlog.clear()


class TestBacklog:
    """The backlog behind the advice: the last count plus what this process created since."""

    def test_creations_count_until_the_next_count(
        self, api: Api, page: str, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A POST raises the backlog at once; the next count replaces the estimate."""
        monkeypatch.setattr(retrieval_service, "_count_open", lambda: ({"interactive": 100}, {}))
        retrieval_service.backlog.clear()
        assert retrieval_service.backlog.pending() == 100
        for _ in range(3):
            assert api.post(body(page, workspace)).status_code == 202
        assert retrieval_service.backlog.pending() == 103  # counted less than a second ago
        monkeypatch.setattr(retrieval_service, "_count_open", lambda: ({"interactive": 7}, {}))
        retrieval_service.backlog.clear()
        assert retrieval_service.backlog.pending() == 7
        retrieval_service.backlog.clear()

    def test_creations_scale_with_the_api_processes(
        self, api: Api, page: str, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With N API processes, what one process created stands for N times as many."""
        from worker.platform.settings import get_settings

        monkeypatch.setattr(retrieval_service, "_count_open", lambda: ({"interactive": 10}, {}))
        monkeypatch.setattr(get_settings(), "api_workers", 4)
        retrieval_service.backlog.clear()
        assert retrieval_service.backlog.pending() == 10
        for _ in range(3):
            assert api.post(body(page, workspace)).status_code == 202
        assert retrieval_service.backlog.pending() == 10 + 3 * 4
        retrieval_service.backlog.clear()


class TestPollDelay:
    """The advice itself, as a pure function of state and backlog."""

    @pytest.mark.parametrize(
        ("state", "pending", "seconds"),
        [
            ("running", 10**6, 1),
            ("pending", 0, 1),
            ("pending", 1, 1),
            ("pending", 25, 1),
            ("pending", 26, 2),
            ("pending", 1_000, 40),
            ("pending", 10**6, 120),
            ("completed", 0, None),
            ("cancelled", 0, None),
            ("unconfirmed", 0, None),
            ("expired", 0, None),
        ],
    )
    def test_poll_delay(self, state: str, pending: int, seconds: int | None) -> None:
        """Running: 1 s; pending: backlog / POLLS_PER_SECOND within 1..120 s; settled: none."""
        assert retrieval_service.poll_delay(state, pending, rand=lambda: 0.5) == seconds

    @pytest.mark.parametrize(
        ("running", "seconds"),
        [(1, 1), (25, 1), (26, 2), (300, 12), (1_500, 30), (10**6, 30)],
    )
    def test_a_running_ones_follows_its_workspaces_running(
        self, running: int, seconds: int
    ) -> None:
        """Running: the workspace's running / POLLS_PER_SECOND within 1..30 s (the pending
        backlog plays no part)."""
        advice = retrieval_service.poll_delay("running", 10**6, rand=lambda: 0.5, running=running)
        assert advice == seconds

    @pytest.mark.parametrize(("running", "seconds"), [(16, 1), (17, 2), (20, 2)])
    def test_few_running_are_told_a_second_whatever_the_jitter(
        self, running: int, seconds: int
    ) -> None:
        """At the jitter's top, up to 16 running are still told 1 s; an agent's 20 at most 2."""
        advice = retrieval_service.poll_delay("running", 0, rand=lambda: 0.999, running=running)
        assert advice == seconds

    def test_jitter_spreads_the_advice(self) -> None:
        """Polls answered together are not sent back together: ±50 % around the backlog share."""
        assert retrieval_service.poll_delay("pending", 1_000, rand=lambda: 0.0) == 20
        assert retrieval_service.poll_delay("pending", 1_000, rand=lambda: 0.999) == 60
        advice = {retrieval_service.poll_delay("pending", 1_000) for _ in range(500)}
        assert len(advice) >= 15 and min(advice) >= 20 and max(advice) <= 60  # type: ignore[operator]
