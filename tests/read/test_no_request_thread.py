"""A diff, and /healthz, never wait for the API's request threads: with every one of them
taken (by reads and writes in flight), both are still answered."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio.to_thread
import httpx
import pytest

from api.auth import SCOPE_RESEARCH, Principal
from api.http.app import create_app
from api.services import evidence_diff
from tests.read.test_diff_bounds import FIRST, SECOND
from tests.read.test_evidence_diff import track

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]
T = TypeVar("T")


def with_request_threads_taken(call: Callable[[], Awaitable[T]]) -> T:
    """`call()` while every token of the default thread limiter (the request threads) is
    held; a call that needs one of them times out."""

    async def scenario() -> T:
        limiter = anyio.to_thread.current_default_thread_limiter()
        holders = [object() for _ in range(int(limiter.total_tokens))]
        for holder in holders:
            await limiter.acquire_on_behalf_of(holder)
        try:
            return await asyncio.wait_for(call(), 30)
        finally:
            for holder in holders:
                limiter.release_on_behalf_of(holder)

    return asyncio.run(scenario())


def test_a_diff_takes_no_request_thread() -> None:
    workspace = uuid.uuid4()
    item = track(workspace, [FIRST, SECOND])
    principal = Principal(uuid.uuid4(), frozenset({workspace}), frozenset({SCOPE_RESEARCH}))
    body = with_request_threads_taken(lambda: evidence_diff.diff_json(principal, item, 1, 2))
    answer = json.loads(body)["diff"]
    assert answer["evidence_id"] == str(item) and answer["changed"] == ["text", "segments"]


def test_healthz_takes_no_request_thread() -> None:
    async def healthz() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            return await client.get("/healthz")

    answer = with_request_threads_taken(healthz)
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}
