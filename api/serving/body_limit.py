"""Refuse request bodies over EVIDENCE_MAX_BODY_BYTES before the app reads them.

A pure ASGI middleware, outside routing and authentication: a declared Content-Length over
the limit is answered 413 before the app runs and before any body byte is read; a body sent
without one (chunked) is counted as it arrives and answered 413 the moment the count passes the
limit. Starlette's own RequestBodyLimitMiddleware is close, but it lets the app run for a
declared oversize and answers in plain text; clients of this service branch on the envelope.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import envelope
from api.serving.header_values import decimal
from worker.platform.settings import get_settings


class BodyTooLarge(HTTPException):
    """Raised into the app when the body passes the limit; the 413 has already been sent.

    An HTTPException, so FastAPI passes it through its body reading instead of turning it into
    a 400, and nothing the app answers afterwards reaches the client.
    """

    def __init__(self) -> None:
        super().__init__(status_code=413, detail="request body too large")


def declared_length(scope: Scope) -> int | None:
    """The request's Content-Length, or None when absent or not a number."""
    value = Headers(scope=scope).get("content-length")
    return None if value is None else decimal(value.strip(), sys.maxsize)


def too_large(limit: int) -> JSONResponse:
    """The 413 answer; it closes the connection, whose unread body is of no use."""
    body = envelope(
        "invalid_input",
        f"the request body is larger than {limit} bytes",
        details={"max_body_bytes": limit},
    )
    return JSONResponse(body, status_code=413, headers={"Connection": "close"})


class BodyLimit:
    """Answer 413 (`invalid_input`) for bodies over the limit, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: Callable[[], int] | None = None) -> None:
        self.app = app
        self.limit = limit or (lambda: get_settings().max_body_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit()
        declared = declared_length(scope)
        if declared is not None and declared > limit:
            await too_large(limit)(scope, receive, send)
            return
        received = 0
        refused = False
        started = False

        async def counted_receive() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    if not started and not refused:
                        refused = True
                        await too_large(limit)(scope, receive, send)
                    raise BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 went out already; whatever the app says now is moot
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except BodyTooLarge:
            if not refused:
                raise
