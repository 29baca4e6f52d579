"""A client for the watch routes that checks every answer against the documented schemas."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from jsonschema import Draft202012Validator, FormatChecker

from tests.support.factories import LEAK_PATTERNS

BASE = "/research-api/watches"


def _validator(name: str) -> Draft202012Validator:
    from api.http.openapi_schemas import components

    schemas = components()
    return Draft202012Validator(
        {"components": {"schemas": schemas}, **schemas[name]}, format_checker=FormatChecker()
    )


@dataclass
class Watches:
    """The watch routes with a key; answers are checked for 500s, leaks and their schema."""

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
        if response.status_code in (200, 201):
            name = "WatchListResponse" if "watches" in response.json() else "WatchResponse"
            _validator(name).validate(response.json())
        return response

    def create(self, workspace: Any, url: str, **extra: Any) -> dict[str, Any]:
        """Create a watch (201); the watch."""
        body = {"workspace_id": str(workspace), "url": url, "kind": "url_text"}
        response = self.call("POST", json={"interval_seconds": 3600, **body, **extra})
        assert response.status_code == 201, response.text
        return dict(response.json()["watch"])
