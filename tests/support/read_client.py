"""A client for the read routes that validates every answer against its tool's schema."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from tests.support.factories import LEAK_PATTERNS, Api, body
from tests.support.read_schemas import (
    validate_brief,
    validate_chunk_search,
    validate_get_chunk,
    validate_get_image,
    validate_quotes,
)

#: Route → validator of its 200 answers (errors are checked as the envelope).
VALIDATORS = {
    "chunks/get": validate_get_chunk,
    "chunks/search": validate_chunk_search,
    "images/get": validate_get_image,
    "evidence/quotes/verify": validate_quotes,
}


@dataclass
class ReadApi:
    """The read routes for one key; every answer is checked."""

    api: Api

    def call(self, route: str, payload: dict[str, Any]) -> httpx.Response:
        response = self.api.client.post(
            f"/research-api/{route}", json=payload, headers=self.api.headers
        )
        assert response.status_code != 500, response.text
        assert not LEAK_PATTERNS.search(response.text), response.text
        data = response.json()
        if response.status_code == 200:
            if route.startswith("briefs/"):
                validate_brief(data)
            elif route in VALIDATORS:
                VALIDATORS[route](data)
        elif route in ("chunks/get", "images/get", "evidence/quotes/verify"):
            VALIDATORS[route](data)  # the error branch of the tool's own schema
        return response

    def ok(self, route: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Call a route that must answer 200; return its JSON."""
        response = self.call(route, payload)
        assert response.status_code == 200, response.text
        return response.json()

    def retrieve(self, url: str, workspace: Any, kind: str = "url_text") -> dict[str, Any]:
        """Retrieve `url` through the worker; return the settled retrieval."""
        created = self.api.post(body(url, workspace, kind)).json()["retrieval"]
        done = self.api.wait(created["id"])
        assert done["state"] == "completed" and done["evidence"], done
        return done
