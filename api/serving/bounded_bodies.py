"""Each JSON body route's bounds, enforced before FastAPI reads the body
(`api.serving.bounded_json`).

A pure ASGI middleware inside `BodyLimit`. For a request to a route in `ROUTES` it answers
at once, without reading the body, a Content-Length over the route's byte limit (413) and a
request without a valid key (401: every body route takes one, and a keyless request should
cost nothing); then it reads the body up to the limit, checks it, and hands the same bytes on.
Other requests pass untouched. FastAPI parses the body again: within the bounds that costs a
few milliseconds at most.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import ApiError, envelope, error_response, unavailable_response
from api.serving.body_limit import declared_length, too_large
from api.serving.bounded_json import Bounds, Refused, parse
from worker.platform.settings import get_settings

API = "/research-api"
#: Routes answering a few ids or a small object.
SMALL = Bounds(max_bytes=16 * 1024, max_values=64)
#: A webhook endpoint: a URL of up to 2 048 and a description of up to 500 characters, each of
#: which JSON may spell as a 12-byte surrogate-pair escape, so a schema-valid body reaches 30 KB.
WEBHOOK = Bounds(max_bytes=64 * 1024, max_values=64)
#: A watch: a URL of up to 2 048 characters, as a webhook's, and a few small fields.
WATCH = Bounds(max_bytes=64 * 1024, max_values=64)
#: `chunks/get` and `images/get`: an opaque id of any length (a long one is a miss), and
#: unknown fields are allowed (and ignored) there.
OPAQUE_ID = Bounds(max_bytes=64 * 1024, max_values=128, max_string_chars=64 * 1024)
#: A brief at every length limit: 100 findings × 500 citations, 10 000-character texts.
BRIEF = Bounds(
    max_bytes=lambda: get_settings().max_body_bytes,
    max_values=200_000,
    max_string_chars=16 * 1024,
)
#: Up to 1 000 retrieve bodies (about 2.3 KB each at their limits). An item may be any JSON
#: value (a bad one is that item's 400), so the bounds are loose but still bound the whole.
BATCH = Bounds(
    max_bytes=4 * 1024 * 1024,
    max_values=16_384,
    max_depth=32,
    max_keys=256,
    max_string_chars=64 * 1024,
    text_unchecked=frozenset({"items"}),
)
BATCH_GET = Bounds(max_bytes=64 * 1024, max_values=2048)
#: A workspace and up to 1 000 evidence ids (about 40 bytes each).
EXPORT = Bounds(max_bytes=64 * 1024, max_values=2048)
#: Up to 100 quotes of up to 10 000 characters (JSON may spell one in 12-byte escapes), each
#: with an evidence id and a revision. Longer text is refused here; up to 64 KiB, the model
#: answers, naming the quote.
QUOTES = Bounds(
    max_bytes=lambda: get_settings().max_body_bytes,
    max_values=1024,
    max_depth=4,
    max_string_chars=64 * 1024,
)

#: (method, path template) of every route with a JSON body, and its bounds. A route with a
#: body missing here fails tests/api/test_bounded_bodies.py.
ROUTES: dict[tuple[str, str], Bounds] = {
    ("POST", f"{API}/evidence/retrieve"): SMALL,
    ("POST", f"{API}/evidence/retrieve/batch"): BATCH,
    ("POST", f"{API}/evidence/retrievals/batch-get"): BATCH_GET,
    ("POST", f"{API}/evidence/quotes/verify"): QUOTES,
    ("POST", f"{API}/evidence/exports"): EXPORT,
    ("POST", f"{API}/chunks/search"): SMALL,
    ("POST", f"{API}/chunks/get"): OPAQUE_ID,
    ("POST", f"{API}/images/search"): SMALL,
    ("POST", f"{API}/images/get"): OPAQUE_ID,
    ("POST", f"{API}/briefs/get"): SMALL,
    ("POST", f"{API}/briefs/create"): BRIEF,
    ("POST", f"{API}/briefs/revise"): BRIEF,
    ("POST", f"{API}/briefs/review"): SMALL,
    ("POST", f"{API}/briefs/archive"): SMALL,
    ("POST", f"{API}/webhooks"): WEBHOOK,
    ("PATCH", f"{API}/webhooks/{{webhook_id}}"): WEBHOOK,
    ("POST", f"{API}/watches"): WATCH,
    ("PATCH", f"{API}/watches/{{watch_id}}"): WATCH,
}


@dataclass(frozen=True)
class Rule:
    """What a request's body must keep to, and how its sender must be known first."""

    bounds: Bounds
    #: The route's template (for metrics and logs when the answer comes from here).
    template: str
    #: Bodies larger than this need a valid key before they are read (0: every body).
    keyless_bytes: int = 0


_COMPILED = [
    (method, re.compile(compile_path(template)[0].pattern), template, bounds)
    for (method, template), bounds in ROUTES.items()
]


def api_rule(scope: Scope) -> Rule | None:
    """The rule of an API request, or None for a request without a bounded body."""
    for method, pattern, template, bounds in _COMPILED:
        if scope["method"] == method and pattern.fullmatch(scope["path"]):
            return Rule(bounds, template)
    return None


#: Resolves an `Authorization` header to a principal, raising ApiError (401) when it does not.
Authenticate = Callable[[str | None], Awaitable[object]]


def refusal(error: Refused, limit: int) -> JSONResponse:
    """The envelope for a body past a bound (413 for its size, else 400)."""
    if error.status == 413:
        return too_large(limit)
    return JSONResponse(envelope("invalid_input", error.message, error.field), status_code=400)


class BoundedBodies:
    """Answer bodies past their route's bounds, and keyless requests, before the app reads them."""

    def __init__(
        self, app: ASGIApp, rule: Callable[[Scope], Rule | None], authenticate: Authenticate
    ) -> None:
        self.app, self.rule, self.authenticate = app, rule, authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rule = self.rule(scope) if scope["type"] == "http" else None
        if rule is None:
            await self.app(scope, receive, send)
            return
        limit = rule.bounds.byte_limit()
        declared = declared_length(scope)
        authorization = Headers(scope=scope).get("authorization")
        answer: JSONResponse | None = None
        if declared is not None and declared > limit:
            answer = too_large(limit)
        elif rule.keyless_bytes == 0 or declared is None or declared > rule.keyless_bytes:
            answer = await self._refused_key(authorization)
        if answer is None:
            data, answer = await self._read(receive, limit, rule, authorization)
        if answer is None:
            try:
                parse(data, rule.bounds)
            except Refused as error:
                answer = refusal(error, limit)
        if answer is not None:
            # The router never saw it: name the route for the request metrics and log.
            scope.setdefault("route", SimpleNamespace(path_format=rule.template))
            await answer(scope, receive, send)
            return
        await self.app(scope, _replay(data, receive), send)

    async def _refused_key(self, authorization: str | None) -> JSONResponse | None:
        """The answer refusing the request's key, or None when the key is valid."""
        try:
            await self.authenticate(authorization)
        except ApiError as error:
            return error_response(error)
        except (DBAPIError, PoolTimeoutError):
            return unavailable_response()
        return None

    async def _read(
        self, receive: Receive, limit: int, rule: Rule, authorization: str | None
    ) -> tuple[bytes, JSONResponse | None]:
        """The whole body, or the answer refusing it as soon as it passes a bound."""
        chunks: list[bytes] = []
        size = 0
        known = rule.keyless_bytes == 0  # the key was checked already when every body needs one
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"", JSONResponse(envelope("invalid_input", "disconnected"), 400)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return b"", too_large(limit)
            if not known and size > rule.keyless_bytes:
                known = True
                answer = await self._refused_key(authorization)
                if answer is not None:
                    return b"", answer
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None


def _replay(data: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body already read, then the connection's own events."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": data, "more_body": False}
        return await receive()

    return replayed
