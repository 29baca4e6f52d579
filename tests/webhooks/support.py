"""A client for the webhook routes that checks every answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from tests.support.factories import LEAK_PATTERNS

BASE = "/research-api/webhooks"


@dataclass
class Hooks:
    """The webhook routes, with a key; every answer is checked for leaks and 500s."""

    client: Any
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def call(self, method: str, path: str = "", **kwargs: Any) -> httpx.Response:
        response: httpx.Response = self.client.request(
            method, BASE + path, headers=self.headers, **kwargs
        )
        assert response.status_code != 500, response.text
        assert not LEAK_PATTERNS.search(response.text), response.text
        assert "whsec_" not in response.text or path in ("", "/") or "rotate" in path
        return response

    def create(self, workspace: Any, url: str, **extra: Any) -> dict[str, Any]:
        """Register an endpoint (201); the answer with its secret."""
        body = {"workspace_id": str(workspace), "url": url, "events": ["retrieval.settled"]}
        response = self.call("POST", json=body | extra)
        assert response.status_code == 201, response.text
        return dict(response.json())

    def deliveries(self, webhook_id: str) -> list[dict[str, Any]]:
        response = self.call("GET", f"/{webhook_id}/deliveries")
        assert response.status_code == 200, response.text
        return list(response.json()["deliveries"])
