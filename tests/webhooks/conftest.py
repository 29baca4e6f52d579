"""Fixtures of the webhook tests: a key's routes, receivers, and settled retrievals."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from tests.conftest import Env
from tests.support.factories import Api, make_key, parked
from tests.support.webhook_receiver import Inbox
from tests.webhooks.support import Hooks


@pytest.fixture
def key(workspace: uuid.UUID) -> str:
    return make_key([workspace])


@pytest.fixture
def hooks(http: object, key: str) -> Hooks:
    return Hooks(http, key)


@pytest.fixture
def client(http: object, key: str) -> Api:
    return Api(http, key)


@pytest.fixture
def inbox(env: Env) -> Inbox:
    """A fresh receiver path on the loopback receiver site (answers 204)."""
    return Inbox(env.receiver)


def _set(retrieval_id: str, **values: Any) -> None:
    from worker.store import db
    from worker.store.models import Retrieval

    T = Retrieval.__table__.c  # type: ignore[attr-defined]
    db.with_transient_retry(
        lambda s: s.execute(
            sa.update(Retrieval).where(T.id == uuid.UUID(retrieval_id)).values(**values)
        )
    )


@pytest.fixture
def settle(workspace: uuid.UUID, client: Api, max_attempts: int) -> Callable[[str], str]:
    """Make a retrieval of the workspace reach `state` the way the service does; its id.

    cancelled: the cancel route; expired: past valid_until, the sweep expires it; unconfirmed:
    running on its last attempt with its lease run out, the sweep gives up on it.
    """
    from worker.domain import clock

    def make(state: str) -> str:
        (retrieval_id,) = parked(workspace)
        now = clock.now()
        if state == "cancelled":
            assert client.cancel(retrieval_id).status_code == 200
        elif state == "expired":
            _set(retrieval_id, valid_until=now - timedelta(seconds=1))
        elif state == "unconfirmed":
            _set(
                retrieval_id,
                state="running",
                attempt=max_attempts,
                lease_until=now - timedelta(seconds=1),
            )
        else:
            raise ValueError(state)
        return retrieval_id

    return make


@pytest.fixture
def max_attempts() -> int:
    from worker.platform.settings import get_settings

    return get_settings().max_attempts
