"""Per-workspace quotas: the open-retrievals ceiling and the write rate; 429 with Retry-After."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from api.services import admission as quotas
from tests.conftest import Env
from tests.support.factories import Api, body, check_envelope, parked
from tests.support.pages import article, slow
from tests.support.services import ROOT
from tests.support.tls_site import TLSSite
from worker.domain import clock
from worker.lanes import quota_overrides as quota_store
from worker.store import db

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]


@pytest.fixture
def page(site: TLSSite) -> str:
    path = f"/quota/{uuid.uuid4().hex}"
    return site.page(path, article("Quotas", marker=path))


@pytest.fixture
def slow_page(site: TLSSite) -> str:
    site.add("/quota/slow", slow)
    return site.url("/quota/slow?s=2")


@pytest.fixture(autouse=True)
def _fresh_limits() -> Iterator[None]:
    """Each test sees the overrides it sets (the API caches them for a few seconds)."""
    quotas.overrides.clear()
    quotas.limiter.reset()
    yield
    quotas.overrides.clear()
    quotas.limiter.reset()


def override(workspace: uuid.UUID, **limits: float | int) -> None:
    """Set overrides as `evidence quotas set` does."""
    wanted = quota_store.Override(
        workspace,
        limits.get("open_retrievals"),  # type: ignore[arg-type]
        limits.get("write_rate"),
        limits.get("write_burst"),  # type: ignore[arg-type]
    )
    db.with_transient_retry(lambda s: quota_store.set_override(s, wanted, clock.now()))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class TestOpenCeiling:
    """A workspace at its ceiling of open retrievals gets 429 for new ones, never for replays."""

    def test_over_the_ceiling_is_429_and_nothing_is_lost(
        self, api: Api, page: str, workspace: uuid.UUID
    ) -> None:
        """Two open of two: the third is 429 rate_limited with Retry-After; replays answer;
        once they settle, room comes back; every accepted retrieval completes."""
        override(workspace, open_retrievals=2)
        held = parked(workspace, 2)
        refused = api.post(body(page, workspace))
        error = check_envelope(refused, 429, "rate_limited")
        assert int(refused.headers["Retry-After"]) >= 1
        assert error["details"]["retry_after_seconds"] == int(refused.headers["Retry-After"])
        # A replay of a known mutation_id (a poll) is answered at the ceiling.
        first = api.get(held[0]).json()["retrieval"]
        replay = api.post(
            {**body("https://example.org/", workspace), "mutation_id": first["mutation_id"]}
        )
        assert replay.status_code == 200 and replay.json()["retrieval"]["id"] == held[0]
        # Cancelling settles one: there is room for one more, which completes.
        api.cancel(held[0])
        accepted = api.post(body(page, workspace))
        assert accepted.status_code == 202
        assert api.wait(accepted.json()["retrieval"]["id"])["state"] == "completed"
        assert api.get(held[1]).json()["retrieval"]["state"] == "pending"  # untouched

    def test_batch_items_over_the_ceiling_are_refused_one_by_one(
        self, api: Api, site: TLSSite, workspace: uuid.UUID
    ) -> None:
        """Room for three: items 1-3 are 202, 4-5 are 429 (with Retry-After), known items 200."""
        override(workspace, open_retrievals=3)
        urls = [
            site.page(f"/quota/{uuid.uuid4().hex}", article("Batch", marker=str(n)))
            for n in range(5)
        ]
        items = [body(url, workspace) for url in urls]
        response = api.batch(items)
        assert response.status_code == 200
        results = response.json()["results"]
        assert [r["status"] for r in results] == [202, 202, 202, 429, 429]
        for refused in results[3:]:
            assert refused["error"]["code"] == "rate_limited"
            assert refused["error"]["details"]["retry_after_seconds"] >= 1
        assert int(response.headers["Retry-After"]) >= 1
        done = [api.wait(r["retrieval"]["id"]) for r in results[:3]]
        assert {d["state"] for d in done} == {"completed"}
        # Sent again once those settled: the known ones are 200, the refused ones now go in.
        again = api.batch(items).json()["results"]
        assert [r["status"] for r in again] == [200, 200, 200, 202, 202]
        assert [r["retrieval"]["id"] for r in again[:3]] == [d["id"] for d in done]
        for result in again[3:]:
            assert api.wait(result["retrieval"]["id"])["state"] == "completed"


class TestWriteRate:
    """The token bucket on new retrievals: burst, then `rate` per second."""

    def test_over_the_rate_is_429_with_retry_after(
        self, api: Api, page: str, workspace: uuid.UUID
    ) -> None:
        """Burst 2 at 0.5/s: the third new retrieval is 429 for ~2 s; a replay is not refused."""
        override(workspace, write_rate=0.5, write_burst=2)
        first = body(page, workspace)
        assert api.post(first).status_code == 202
        assert api.post(body(page, workspace)).status_code == 202
        refused = api.post(body(page, workspace))
        check_envelope(refused, 429, "rate_limited")
        wait = int(refused.headers["Retry-After"])
        assert 1 <= wait <= 3
        assert api.post(first).status_code == 200  # a poll costs no token
        time.sleep(wait)
        assert api.post(body(page, workspace)).status_code == 202

    def test_batch_items_over_the_rate_are_refused_one_by_one(
        self, api: Api, page: str, workspace: uuid.UUID
    ) -> None:
        """Burst 3: a batch of five new items gets three in; known items never cost tokens."""
        override(workspace, write_rate=0.2, write_burst=3)
        items = [body(page, workspace) for _ in range(5)]
        results = api.batch(items).json()["results"]
        assert [r["status"] for r in results] == [202, 202, 202, 429, 429]
        assert results[3]["error"]["details"]["retry_after_seconds"] >= 5
        replay = api.batch(items[:3]).json()["results"]
        assert [r["status"] for r in replay] == [200, 200, 200]
        for result in results[:3]:
            assert api.wait(result["retrieval"]["id"])["state"] == "completed"

    def test_other_workspaces_keep_their_own_bucket(
        self, http: object, page: str, workspace: uuid.UUID
    ) -> None:
        """One workspace's empty bucket does not refuse another's (defaults apply there)."""
        from tests.support.factories import make_key

        other = uuid.uuid4()
        client = Api(http, make_key([workspace, other]))
        override(workspace, write_rate=0.1, write_burst=1)
        assert client.post(body(page, workspace)).status_code == 202
        check_envelope(client.post(body(page, workspace)), 429, "rate_limited")
        for _ in range(5):
            assert client.post(body(page, other)).status_code == 202

    def test_the_keys_of_one_workspace_share_its_bucket(
        self, http: object, page: str, workspace: uuid.UUID
    ) -> None:
        """The bucket is the workspace's, not the key's: once one key has spent it, another key
        of the workspace is refused too, on the single route and in a batch."""
        from tests.support.factories import make_key

        override(workspace, write_rate=0.1, write_burst=1)
        spender, other_key = (Api(http, make_key([workspace])) for _ in range(2))
        assert spender.post(body(page, workspace)).status_code == 202
        check_envelope(other_key.post(body(page, workspace)), 429, "rate_limited")
        (item,) = other_key.batch([body(page, workspace)]).json()["results"]
        assert (item["status"], item["error"]["code"]) == (429, "rate_limited"), item

    def test_one_key_of_two_workspaces_spends_two_buckets(
        self, http: object, page: str, workspace: uuid.UUID
    ) -> None:
        """A key of two workspaces, each allowed one write now: it writes once to each (singles,
        then a batch with an item for each of two more), and only a second write is refused."""
        from tests.support.factories import make_key

        other, third, fourth = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        for each in (workspace, other, third, fourth):
            override(each, write_rate=0.1, write_burst=1)
        client = Api(http, make_key([workspace, other, third, fourth]))
        assert client.post(body(page, workspace)).status_code == 202
        assert client.post(body(page, other)).status_code == 202
        check_envelope(client.post(body(page, other)), 429, "rate_limited")
        batch = client.batch([body(page, third), body(page, fourth)]).json()["results"]
        assert [r["status"] for r in batch] == [202, 202], batch
        again = client.batch([body(page, third), body(page, fourth)]).json()["results"]
        assert [r["status"] for r in again] == [429, 429], again

    def test_redis_down_degrades_open(
        self, api: Api, env: Env, page: str, workspace: uuid.UUID
    ) -> None:
        """With Redis unreachable the rate is not enforced (the POST is accepted, 202)."""
        override(workspace, write_rate=0.1, write_burst=1)
        assert api.post(body(page, workspace)).status_code == 202
        env.redis.stop()
        try:
            created = api.post(body(page, workspace))
            assert created.status_code == 202
        finally:
            env.redis.start()
        assert api.wait(created.json()["retrieval"]["id"], timeout=60)["state"] == "completed"


class TestCommand:
    """`evidence quotas set/show`: overrides stored in the database, applied by the API."""

    def test_set_and_show(self, api: Api, page: str, workspace: uuid.UUID) -> None:
        """An operator's override applies to that workspace only; show lists it."""
        done = cli("quotas", "set", "--workspace", str(workspace), "--open", "1", "--rate", "50")
        assert done.returncode == 0, done.stderr
        assert str(workspace) in done.stdout
        shown = cli("quotas", "show").stdout
        line = next(row for row in shown.splitlines() if row.startswith(str(workspace)))
        assert line.split()[1:4] == ["1", "50", "2000"] and "(default)" in line
        assert "defaults: open 10000" in shown
        parked(workspace, 1)
        check_envelope(api.post(body(page, workspace)), 429, "rate_limited")
        other = uuid.uuid4()
        from tests.support.factories import make_key

        assert Api(api.client, make_key([other])).post(body(page, other)).status_code == 202
        cleared = cli("quotas", "set", "--workspace", str(workspace), "--clear")
        assert cleared.returncode == 0, cleared.stderr
        quotas.overrides.clear()
        assert api.post(body(page, workspace)).status_code == 202

    def test_usage_errors(self, workspace: uuid.UUID) -> None:
        """Nothing to set, or a negative ceiling, is a usage error (exit 2)."""
        assert cli("quotas", "set", "--workspace", str(workspace)).returncode == 2
        assert cli("quotas", "set", "--workspace", str(workspace), "--open", "-1").returncode == 2
