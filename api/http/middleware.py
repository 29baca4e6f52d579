"""Request middleware: count and time every request, and log it as one JSON line."""

from __future__ import annotations

import time
from typing import Any

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.http.metrics import HTTP_DURATION, HTTP_REQUESTS

log = structlog.get_logger("api.request")

#: Routes polled by machines: counted, never logged.
QUIET_ROUTES = frozenset({"/metrics", "/healthz", "/readyz"})
UNMATCHED = "unmatched"


def route_of(scope: Scope) -> str:
    """The matched route's template (bounded label values), or `unmatched`."""
    route = scope.get("route")
    # The template without converters (`{evidence_id}`, not `{evidence_id:uuid}`).
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    return path if isinstance(path, str) and path else UNMATCHED


class RequestMetrics:
    """Pure ASGI middleware: no body buffering, works for streaming responses."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        answered: float | None = None  # when the last of the body was sent

        async def send_status(message: Message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                answered = time.perf_counter()

        try:
            await self.app(scope, receive, send_status)
        finally:
            # The time to answer, without a background task run after it (a POST's publish).
            self._record(scope, status, (answered or time.perf_counter()) - start)

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        method, route = scope["method"], route_of(scope)
        HTTP_REQUESTS.labels(method, route, str(status)).inc()
        HTTP_DURATION.labels(method, route).observe(seconds)
        if route in QUIET_ROUTES:
            return
        fields: dict[str, Any] = {"method": method, "route": route, "status": status}
        retrieval_id = (scope.get("path_params") or {}).get("retrieval_id")
        if retrieval_id is not None:
            fields["retrieval_id"] = str(retrieval_id)
        log.info("request", duration_ms=round(seconds * 1000, 1), **fields)
