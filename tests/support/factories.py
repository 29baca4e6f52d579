"""Builders for tests: API keys, request bodies, and a client that checks every response."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx

from tests.support.schemas import validate_retrieval_payload
from tests.support.slowdown import scaled

SETTLED = {"completed", "cancelled", "unconfirmed", "expired"}
#: Things that must never appear in a response body.
LEAK_PATTERNS = re.compile(
    r"Traceback|File \"/|sqlalchemy|psycopg|SELECT |INSERT |UPDATE retrieval|evk_", re.IGNORECASE
)


def make_key(workspaces: list[uuid.UUID], scopes: tuple[str, ...] = ("agent:research",)) -> str:
    """Create a real API key in the test database."""
    from api.auth import create_key
    from worker.domain import clock
    from worker.store import db

    return db.with_transient_retry(lambda s: create_key(s, workspaces, list(scopes), clock.now()))


def body(url: str, workspace: uuid.UUID, kind: str = "url_text", **extra: Any) -> dict[str, Any]:
    """A valid retrieve body with a fresh mutation_id."""
    return {
        "url": url,
        "kind": kind,
        "workspace_id": str(workspace),
        "mutation_id": str(uuid.uuid4()),
        **extra,
    }


def check_envelope(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Assert an error response is the contract's envelope with `code`; return the error."""
    assert response.status_code == status, response.text
    payload = response.json()
    assert set(payload) == {"error"}, payload
    error = payload["error"]
    assert error["code"] == code, payload
    assert isinstance(error["message"], str) and error["message"]
    assert set(error) <= {"code", "message", "field", "details"}
    assert not LEAK_PATTERNS.search(response.text), response.text
    return error


def check_batch_result(result: dict[str, Any]) -> None:
    """Assert one batch item's result is a retrieval (200/202) or an error envelope (4xx)."""
    status = result["status"]
    if status in (200, 202):
        assert set(result) == {"status", "retrieval"}, result
        validate_retrieval_payload({"retrieval": result["retrieval"]})
    else:
        assert status in (400, 403, 409, 429), result
        assert set(result) == {"status", "error"}, result
        error = result["error"]
        assert isinstance(error["message"], str) and error["message"], result
        assert set(error) <= {"code", "message", "field", "details"}, result


@dataclass
class Api:
    """An HTTP client for the service that validates every retrieval payload it receives."""

    client: httpx.Client | Any
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def _checked(self, response: httpx.Response) -> httpx.Response:
        assert response.status_code != 500, response.text
        assert not LEAK_PATTERNS.search(response.text), response.text
        if response.status_code in (200, 202):
            document = response.json()
            if "retrieval" in document:
                validate_retrieval_payload(document)
            for result in document.get("results", []):
                check_batch_result(result)
            for retrieval in document.get("retrievals", []):
                if retrieval is not None:
                    validate_retrieval_payload({"retrieval": retrieval})
        return response

    def batch(self, items: list[Any]) -> httpx.Response:
        """POST the batch route with these items."""
        return self._checked(
            self.client.post(
                "/research-api/evidence/retrieve/batch",
                json={"items": items},
                headers=self.headers,
            )
        )

    def batch_get(self, ids: list[str], wait: int | None = None) -> httpx.Response:
        """POST the batch read, with `Prefer: wait=N` when `wait` is given."""
        headers = self.headers | ({"Prefer": f"wait={wait}"} if wait is not None else {})
        return self._checked(
            self.client.post(
                "/research-api/evidence/retrievals/batch-get",
                json={"ids": ids},
                headers=headers,
            )
        )

    def long_poll(self, retrieval_id: str, prefer: str) -> httpx.Response:
        """GET the retrieval with this `Prefer` header."""
        return self._checked(
            self.client.get(
                f"/research-api/evidence/retrievals/{retrieval_id}",
                headers=self.headers | {"Prefer": prefer},
            )
        )

    def post(self, payload: dict[str, Any]) -> httpx.Response:
        return self._checked(
            self.client.post("/research-api/evidence/retrieve", json=payload, headers=self.headers)
        )

    def get(self, retrieval_id: str) -> httpx.Response:
        return self._checked(
            self.client.get(
                f"/research-api/evidence/retrievals/{retrieval_id}", headers=self.headers
            )
        )

    def cancel(self, retrieval_id: str) -> httpx.Response:
        return self._checked(
            self.client.post(
                f"/research-api/evidence/retrievals/{retrieval_id}/cancel", headers=self.headers
            )
        )

    def evidence(self, evidence_id: str, revision: int | None = None) -> httpx.Response:
        params = {"revision": revision} if revision else None
        return self._checked(
            self.client.get(
                f"/research-api/evidence/{evidence_id}", params=params, headers=self.headers
            )
        )

    def wait(
        self, retrieval_id: str, states: set[str] = SETTLED, timeout: float = 30
    ) -> dict[str, Any]:
        """Poll until the retrieval reaches one of `states`; return it. `timeout` is seconds on a
        quiet machine, stretched on a busy one: it only catches a retrieval that never settles."""
        timeout = scaled(timeout)
        deadline = time.monotonic() + timeout
        while True:
            retrieval = self.get(retrieval_id).json()["retrieval"]
            if retrieval["state"] in states:
                return retrieval
            if time.monotonic() > deadline:
                raise AssertionError(f"still {retrieval['state']} after {timeout} s: {retrieval}")
            time.sleep(0.1)


def parked(
    workspace: uuid.UUID,
    count: int = 1,
    url: str = "https://example.org/",
    lane: str = "interactive",
    urls: list[str] | None = None,
) -> list[str]:
    """Pending retrievals no worker will run while a test looks at them.

    Recorded as the API records them (in `lane`; of `urls` when given, else `count` of `url`),
    then marked published far in the future, so the sweep does not publish them either; they
    stay pending until a test settles, cancels or runs them.
    """
    from datetime import timedelta

    import sqlalchemy as sa

    from worker.domain import clock
    from worker.lanes import open_tally
    from worker.retrieval import records as retrievals
    from worker.store import db
    from worker.store.models import Retrieval

    def record(session: Any) -> list[uuid.UUID]:
        now = clock.now()
        wanted = urls or [url] * count
        rows = [
            retrievals.create_retrieval(
                session,
                retrievals.NewRetrieval(workspace, uuid.uuid4(), each, "url_text", None),
                now + timedelta(microseconds=n),  # the batch lane runs them in this order
                timedelta(hours=1),
                lane,
            )[0]
            for n, each in enumerate(wanted)
        ]
        open_tally.room(session, workspace, len(rows), 10**9)  # counted as the API counts them
        ids = [row.id for row in rows]
        T = Retrieval.__table__.c  # type: ignore[attr-defined]
        session.execute(
            sa.update(Retrieval).where(T.id.in_(ids)).values(published_at=now + timedelta(days=1))
        )
        return ids

    return [str(i) for i in db.with_transient_retry(record)]


def cancel_open(workspace: uuid.UUID | None) -> None:
    """Cancel whatever a test left open in `workspace` (None: in every workspace), so it
    burdens no later test."""
    import sqlalchemy as sa

    from worker.domain import clock
    from worker.retrieval import transitions
    from worker.store import db
    from worker.store.models import Retrieval

    T = Retrieval.__table__.c  # type: ignore[attr-defined]

    def cancel_all(session: Any) -> None:
        query = sa.select(Retrieval).where(T.state.in_(["pending", "running"]))
        if workspace is not None:
            query = query.where(T.workspace_id == workspace)
        for row in session.execute(query).scalars().all():
            transitions.cancel(session, row, clock.now())

    db.with_transient_retry(cancel_all)
