"""The README's ten-line receiver works: it accepts what the service signs, refuses the rest."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from worker.domain import clock
from worker.webhooks import signing

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> tuple[TestClient, str]:
    section = README.read_text(encoding="utf-8").split("## Webhooks", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    secret = signing.new_secret()
    monkeypatch.setenv("WEBHOOK_SECRET", secret)
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), "README receiver", "exec"), namespace)
    return TestClient(namespace["app"]), secret


def _post(client: TestClient, body: str, headers: dict[str, str]) -> int:
    return client.post("/evidence", content=body, headers=headers).status_code


def test_the_readme_receiver_verifies_signatures(receiver: tuple[TestClient, str]) -> None:
    client, secret = receiver
    body = json.dumps({"type": "retrieval.settled", "data": {"retrieval": {"state": "expired"}}})
    now = clock.now()
    assert _post(client, body, signing.headers([secret], "msg-1", now, body)) == 200
    tampered = body.replace("expired", "completed")
    assert _post(client, tampered, signing.headers([secret], "msg-1", now, body)) == 400
    other = signing.headers([signing.new_secret()], "msg-1", now, body)
    assert _post(client, body, other) == 400
    stale = signing.headers([secret], "msg-1", now - timedelta(minutes=10), body)
    assert _post(client, body, stale) == 400
