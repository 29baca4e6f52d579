"""Structured logs of a real run: JSON with retrieval and workspace ids, no secrets or text."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from tests.conftest import Services
from tests.ops.conftest import LiveApi
from tests.support.factories import SETTLED, Api, body, make_key
from tests.support.pages import article
from tests.support.services import wait_for
from tests.support.tls_site import TLSSite
from worker.platform import logs

pytestmark = pytest.mark.usefixtures("services")


def json_lines(text: str) -> list[dict[str, Any]]:
    """The lines of a log that are JSON objects."""
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


class TestRunLogs:
    """Logs that API and worker processes write while serving one retrieval."""

    def test_ids_bound_and_nothing_secret(
        self, live_api: LiveApi, services: Services, site: TLSSite
    ) -> None:
        """Both processes log the retrieval's id and workspace; no key, no page text anywhere."""
        workspace = uuid.uuid4()
        key = make_key([workspace])
        marker = f"zebracrossing{uuid.uuid4().hex[:8]}"
        url = site.page(f"/logs/{uuid.uuid4().hex}", article("Secret lakes", marker=marker))
        with httpx.Client(base_url=live_api.url, timeout=10) as client:
            api = Api(client, key)
            rid = api.post(body(url, workspace)).json()["retrieval"]["id"]
            done = api.wait(rid, SETTLED, timeout=60)
        assert done["result"]["status"] == "ready" and marker in done["result"]["text"]

        def worker_settled() -> list[dict[str, Any]]:
            mine = [r for r in json_lines(services.worker.log()) if r.get("retrieval_id") == rid]
            return mine if any(r["event"] == "settled" for r in mine) else []

        worker_records = wait_for(worker_settled, timeout=15)
        events = {r["event"] for r in worker_records}  # type: ignore[union-attr]
        assert {"claimed", "settled"} <= events
        for record in worker_records:  # type: ignore[union-attr]
            if record["event"] in ("claimed", "settled"):
                assert record["workspace_id"] == str(workspace)
                assert record["task_id"] and record["task_name"] == "evidence.retrieve"

        api_records = [r for r in json_lines(live_api.log()) if r.get("retrieval_id") == rid]
        created = [r for r in api_records if r["event"] == "retrieval_created"]
        assert len(created) == 1 and created[0]["workspace_id"] == str(workspace)
        polled = [r for r in api_records if r["event"] == "request"]
        assert polled and all(r["status"] == 200 for r in polled)

        for text in (services.worker.log(), live_api.log()):
            assert key not in text
            assert key.split("_", 1)[-1][:16] not in text
            assert marker not in text
            assert "Paragraph 3" not in text


class TestRedaction:
    """The redaction processor in front of every renderer."""

    def test_secret_keys_are_redacted(self) -> None:
        """Values under secret-looking keys and page text never reach the rendered line."""
        event = {"event": "x", "authorization": "Bearer evk_x", "text": "page", "url": "u"}
        redacted = logs._redact(None, "info", dict(event))
        assert redacted["authorization"] == "[redacted]"
        assert redacted["text"] == "[redacted]"
        assert redacted["url"] == "u"
