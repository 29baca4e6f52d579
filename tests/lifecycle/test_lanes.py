"""Lanes: interactive work overtakes queued batch work; batch work is shared round-robin."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.conftest import Env, Services
from tests.support.factories import Api, body, cancel_open, make_key, parked
from tests.support.pages import article, slow
from tests.support.services import Process
from tests.support.slowdown import scaled
from tests.support.tls_site import Page, TLSSite, send
from worker.jobs.celery_app import (
    BATCH_QUEUE,
    INTERACTIVE_QUEUE,
    QUEUE_PRIORITY,
    SWEEP_QUEUE,
    LaneOrder,
)
from worker.jobs.sweep import plan_publish

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]

#: The session's retrieval worker runs this many threads (tests/conftest.py).
WORKER_PROCESSES = 2


@pytest.fixture
def slow_url(site: TLSSite) -> str:
    site.add("/lanes/slow", slow)
    return site.url("/lanes/slow?s=1.5")


def wait_running(api: Api, ids: list[str], count: int) -> None:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = api.batch_get(ids).json()["retrievals"]
        if sum(r["state"] == "running" for r in found) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} running")


def settled_order(api: Api, ids: list[str]) -> list[tuple[str, str]]:
    """(settled_at, id) of every retrieval once all settled, earliest first."""
    done = [api.wait(i, timeout=60) for i in ids]
    assert {d["state"] for d in done} == {"completed"}, done
    return sorted((d["settled_at"], d["id"]) for d in done)


class TestInteractiveFirst:
    """A retrieval submitted alone does not wait behind a batch."""

    def test_single_overtakes_a_queued_batch(
        self, api: Api, slow_url: str, site: TLSSite, workspace: uuid.UUID
    ) -> None:
        """Six slow batch items fill the worker's two threads, two more wait reserved in the
        process (`node.THREADS_PREFETCH_MULTIPLIER`) and two in the broker; a single POSTed
        then overtakes every item it finds waiting: the two in the broker at least, and the
        reserved ones unless a thread freed before the single reached the process (FIFO:
        after all of them)."""
        batch = api.batch([body(slow_url, workspace) for _ in range(6)]).json()["results"]
        batch_ids = [r["retrieval"]["id"] for r in batch]
        wait_running(api, batch_ids, WORKER_PROCESSES)
        other = uuid.uuid4()
        agent = Api(api.client, make_key([other]))
        url = site.page(f"/lanes/{uuid.uuid4().hex}", article("Alone"))
        single = agent.post(body(url, other)).json()["retrieval"]["id"]
        order = settled_order(api, batch_ids)
        alone = agent.wait(single, timeout=60)
        after = [settled for settled, _ in order if settled > alone["settled_at"]]
        assert len(after) >= 2, (alone["settled_at"], order)


class Turnstile:
    """An origin's one route: it notes which page each request asks for (`?n=`), in arrival
    order, holds the first one until `release` is set, and serves every later one slowly, so
    the order of the worker's fetches is the order its per-host gate admitted them in."""

    #: Seconds each request after the first takes to answer (the gate's holder meanwhile).
    SERVE_SECONDS = 0.2

    def __init__(self) -> None:
        self.order: list[str] = []
        self.first_arrived = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, handler: BaseHTTPRequestHandler) -> None:
        name = parse_qs(urlsplit(handler.path).query)["n"][0]
        with self._lock:
            self.order.append(name)
            first = len(self.order) == 1
        if first:
            self.first_arrived.set()
            self.release.wait(120)
        else:
            time.sleep(self.SERVE_SECONDS)
        send(handler, Page(article(f"Page {name}", marker=name).encode()))


#: Retrievals the one-fetch-per-host worker keeps in flight (room for the batch and the singles).
GATED_IN_FLIGHT = 32


@pytest.fixture
def one_fetch_per_host(services: Services, env: Env) -> Iterator[TLSSite]:
    """An origin of its own, and the session's worker replaced by one that fetches one page of
    a host at a time (`EVIDENCE_FETCH_PER_HOST_LIMIT=1`) with many retrievals in flight, fetch
    bounds long enough to wait at that gate; the session's worker is back afterwards."""
    origin = TLSSite(ca=env.site.ca).start()
    ports = [*os.environ["EVIDENCE_FETCH_ALLOWED_PORTS"].split(","), str(origin.port)]
    extra = {
        "EVIDENCE_FETCH_ALLOWED_PORTS": ",".join(ports),
        "EVIDENCE_FETCH_PER_HOST_LIMIT": "1",
        "EVIDENCE_FETCH_TOTAL_TIMEOUT_SECONDS": "120",
        "EVIDENCE_FETCH_READ_TIMEOUT_SECONDS": "120",
    }
    original = services.worker
    original.stop()
    services.worker = Process(
        ["worker", "--queues", "retrievals,retrievals-batch"]
        + ["--concurrency", str(GATED_IN_FLIGHT), "--hostname", f"gate-{uuid.uuid4().hex[:6]}@%h"],
        env.tmp / "gate-worker.log",
        env=extra,
    )
    try:
        services.start_worker()
        yield origin
    finally:
        services.worker.stop()
        services.worker = original
        services.start_worker()
        origin.stop()


class TestInteractiveFirstAtTheGates:
    """Inside a worker, the gates of scarce things (here a host's fetches) admit interactive
    work before batch work that waited longer."""

    BATCH = 12
    SINGLES = 3

    def test_singles_fetch_before_the_batch_waiting_at_a_hosts_gate(
        self, http: object, one_fetch_per_host: TLSSite, workspace: uuid.UUID
    ) -> None:
        """A batch of 12 pages of one host: the first is fetched and held by the origin, the
        other 11 are claimed and queue at the host's gate (one fetch at a time). Then three
        singles of that host are claimed and queue behind them. Once the held fetch is let go,
        the singles are fetched next, before most of the batch that was there first (batch
        first: after all of it)."""
        origin = one_fetch_per_host
        turnstile = Turnstile()
        origin.add("/gate/page", turnstile)
        batcher = Api(http, make_key([workspace]))
        other = uuid.uuid4()
        agent = Api(http, make_key([other]))
        try:
            items = [
                body(origin.url(f"/gate/page?n=batch-{n}"), workspace) for n in range(self.BATCH)
            ]
            batch_ids = [r["retrieval"]["id"] for r in batcher.batch(items).json()["results"]]
            assert turnstile.first_arrived.wait(60), "no batch page was fetched"
            wait_running(batcher, batch_ids, self.BATCH)
            singles = [
                agent.post(body(origin.url(f"/gate/page?n=single-{n}"), other)).json()
                for n in range(self.SINGLES)
            ]
            single_ids = [s["retrieval"]["id"] for s in singles]
            wait_running(agent, single_ids, self.SINGLES)
            # Claimed: their threads reach the gate within milliseconds; give them a moment
            # (longer on a busy machine).
            time.sleep(scaled(1.0))
            turnstile.release.set()
            for retrieval_id in single_ids:
                assert agent.wait(retrieval_id, timeout=60)["state"] == "completed"
            for retrieval_id in batch_ids:
                assert batcher.wait(retrieval_id, timeout=60)["state"] == "completed"
        finally:
            turnstile.release.set()
            cancel_open(workspace)
            cancel_open(other)
        order = turnstile.order
        assert sorted(order) == sorted(
            [f"batch-{n}" for n in range(self.BATCH)] + [f"single-{n}" for n in range(self.SINGLES)]
        ), " ".join(order)
        last_single = max(order.index(f"single-{n}") for n in range(self.SINGLES))
        batch_after = [name for name in order[last_single:] if name.startswith("batch-")]
        # Interactive first: the singles right after the held page (11 of the batch after them,
        # give or take one that reached the gate late); batch first: none.
        assert len(batch_after) >= self.BATCH // 2, " ".join(order)


class TestSinglesBeyondTheLimit:
    """A workspace looping over the single route is running a batch: it joins the batch lane."""

    def test_singles_past_the_interactive_limit_go_to_the_batch_lane(
        self, api: Api, site: TLSSite, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With 2 open interactive retrievals allowed, the third single is batch work; it still
        completes, and once the workspace is below the limit again singles are interactive."""
        from worker.platform.settings import get_settings

        monkeypatch.setattr(get_settings(), "interactive_open_limit", 2)
        held = parked(workspace, 2)
        url = site.page(f"/lanes/{uuid.uuid4().hex}", article("Third"))
        third = api.post(body(url, workspace)).json()["retrieval"]["id"]
        assert lanes(third) == "batch"
        assert api.wait(third)["state"] == "completed"
        api.cancel(held[0])
        fourth = api.post(body(url, workspace)).json()["retrieval"]["id"]
        assert lanes(fourth) == "interactive"
        assert api.wait(fourth)["state"] == "completed"
        api.cancel(held[1])


def lanes(retrieval_id: str) -> str:
    import sqlalchemy as sa

    from worker.store import db
    from worker.store.models import Retrieval

    T = Retrieval.__table__.c  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        query = sa.select(T.lane).where(T.id == uuid.UUID(retrieval_id))
        return str(session.execute(query).scalar_one())


class TestRoundRobin:
    """Within the batch lane, workspaces take turns, whatever the length of their queues."""

    def test_small_batch_is_not_stuck_behind_a_long_one(
        self, http: object, slow_url: str, workspace: uuid.UUID
    ) -> None:
        """A submits 8, then B submits 2: B's are claimed in turn with A's, not after them."""
        a = Api(http, make_key([workspace]))
        first = a.batch([body(slow_url, workspace) for _ in range(8)]).json()["results"]
        a_ids = [r["retrieval"]["id"] for r in first]
        wait_running(a, a_ids, WORKER_PROCESSES)
        other = uuid.uuid4()
        b = Api(http, make_key([other]))
        second = b.batch([body(slow_url, other) for _ in range(2)]).json()["results"]
        b_ids = [r["retrieval"]["id"] for r in second]
        b_last = max(settled for settled, _ in settled_order(b, b_ids))
        a_after = [settled for settled, _ in settled_order(a, a_ids) if settled > b_last]
        # Round-robin: B's two are claimed among A's next two or three, so at least three of
        # A's eight settle after B's last (FIFO: none).
        assert len(a_after) >= 3, (b_last, a_after)


class TestQueueOrder:
    """What a worker takes first when several of its queues hold messages."""

    def test_priority_order_whatever_the_given_order(self) -> None:
        """kombu hands the cycle its queues as a set: the order must not depend on it."""
        cycle = LaneOrder()
        for given in ([BATCH_QUEUE, INTERACTIVE_QUEUE, SWEEP_QUEUE], [INTERACTIVE_QUEUE, "x"]):
            cycle.update(set(given))
            assert cycle.consume(len(given)) == [q for q in QUEUE_PRIORITY if q in given] + [
                q for q in given if q not in QUEUE_PRIORITY
            ]
            cycle.rotate(cycle.items[0])  # serving a queue never moves it
            assert cycle.items[0] == [q for q in QUEUE_PRIORITY if q in given][0]


class TestSweepKeepsLanes:
    """What the sweep publishes again goes back to the lane it came from."""

    def test_plan_by_lane(self) -> None:
        """Never-published rows always; stale ones only beyond what the lane's queue holds."""
        ids = [uuid.uuid4() for _ in range(6)]
        due = [(ids[0], "batch"), (ids[1], "interactive"), (ids[2], "batch")]
        due += [(ids[3], "batch"), (ids[4], "interactive"), (ids[5], "batch")]
        never = {ids[0], ids[1]}
        plan = plan_publish(due, never, {INTERACTIVE_QUEUE: 0, BATCH_QUEUE: 2})
        assert plan == {"interactive": [ids[1], ids[4]], "batch": [ids[0], ids[2]]}
        assert plan_publish(due, set(), {INTERACTIVE_QUEUE: 5, BATCH_QUEUE: 5}) == {}

    def test_lost_batch_messages_are_republished(
        self, api: Api, site: TLSSite, workspace: uuid.UUID
    ) -> None:
        """Batch rows whose messages never reached the broker are run by the sweep's publish."""
        import sqlalchemy as sa

        from worker.store import db
        from worker.store.models import Retrieval

        url = site.page(f"/lanes/{uuid.uuid4().hex}", article("Republished"))
        ids = parked(workspace, 3, url)
        T = Retrieval.__table__.c  # type: ignore[attr-defined]
        db.with_transient_retry(
            lambda s: s.execute(
                sa.update(Retrieval)
                .where(T.id.in_([uuid.UUID(i) for i in ids]))
                .values(lane="batch", published_at=None)
            )
        )
        done = [api.wait(i, timeout=60) for i in ids]
        assert {d["state"] for d in done} == {"completed"}
