"""The service as an MCP server (official `mcp` SDK, low-level server) over stdio or HTTP.

Discovery advertises each registered tool with its contract's input schema and annotations
exactly, and its output schema when `SOSOAPI_OUTPUT_SCHEMAS=1`. Every call authenticates the
caller with the API's own `authenticate` (the API key comes from EVIDENCE_API_KEY over stdio and
from the request's `Authorization: Bearer` header over HTTP); scope and workspace checks stay in
`Principal.require`. Failures are tool errors (`isError`) carrying the contract's envelope.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
import structlog
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.auth import Principal, authenticate, principal_for
from api.errors import ApiError, envelope
from api.mcp import read_tools  # noqa: F401  (registers the read-side tools)
from api.mcp.tools import REGISTRY, ToolSpec, parse_arguments
from api.serving import server as serving
from api.serving.body_limit import BodyLimit
from api.serving.bounded_bodies import BoundedBodies, Rule
from api.serving.bounded_json import Bounds
from worker.platform.settings import get_settings
from worker.store import db

log = structlog.get_logger(__name__)

SERVER_NAME = "evidence-retrieval"
#: Codes a tool error may carry (the contract's); anything else is reported as `internal`.
TOOL_ERROR_CODES = frozenset({"invalid_input", "not_entitled", "upstream_unavailable", "internal"})

#: An MCP message over HTTP: the largest tool arguments are research_verify_quote's 100 quotes
#: of up to 10 000 characters (3 bytes each in UTF-8), and an opaque id of any length (the API's
#: `chunks/get` takes up to 64 KiB). Text in `params` is checked by each call, as it is over
#: stdio, so that a bad argument is a tool error naming it.
MESSAGE_BOUNDS = Bounds(
    max_bytes=4 * 1024 * 1024,
    max_values=4096,
    max_depth=16,
    max_string_chars=64 * 1024,
    text_unchecked=frozenset({"params"}),
)
#: Larger bodies need a valid key before they are read: without one, a call is refused anyway,
#: and `initialize` or `tools/list` take a few hundred bytes.
KEYLESS_BYTES = 16 * 1024
MCP_PATH = "/mcp"

#: Where a call's credentials come from: the `Authorization` header value, or None.
CredentialSource = Callable[[ServerRequestContext[Any, Any]], str | None]


def stdio_credentials(_ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The key from EVIDENCE_API_KEY, as a Bearer header (stdio has no headers of its own)."""
    key = get_settings().api_key
    return f"Bearer {key.get_secret_value()}" if key is not None else None


def http_credentials(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The HTTP request's own `Authorization` header."""
    request = ctx.request
    headers = getattr(request, "headers", None)
    return headers.get("authorization") if headers is not None else None


def output_schemas_enabled() -> bool:
    """Whether discovery includes output schemas (`SOSOAPI_OUTPUT_SCHEMAS=1`)."""
    return os.environ.get("SOSOAPI_OUTPUT_SCHEMAS", "").strip().lower() in {"1", "true", "yes"}


def describe(spec: ToolSpec, with_output_schema: bool) -> types.Tool:
    """The discovery entry of one tool, built from its contract files."""
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema if with_output_schema else None,
        annotations=types.ToolAnnotations.model_validate(spec.annotations),
    )


def tool_error(
    code: str, message: str, field: str | None = None, details: dict[str, Any] | None = None
) -> types.CallToolResult:
    """A tool error (`isError`) carrying the contract's envelope as text and structured content."""
    if code not in TOOL_ERROR_CODES:
        code, message, field, details = "internal", "internal error", None, None
    body = envelope(code, message, field, details)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(body))],
        structured_content=body,
        is_error=True,
    )


def tool_result(payload: Mapping[str, Any]) -> types.CallToolResult:
    """A successful result: the payload as structured content, and as JSON text for old clients."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(payload))],
        structured_content=dict(payload),
    )


def _principal(authorization: str | None) -> Principal:
    with db.session_scope(readonly=True) as session:
        return authenticate(session, authorization)


async def call(
    spec: ToolSpec, authorization: str | None, arguments: dict[str, Any]
) -> types.CallToolResult:
    """Authenticate, check the arguments, run the tool; map every failure to a tool error."""
    try:
        principal = await anyio.to_thread.run_sync(_principal, authorization)
        parsed = parse_arguments(spec, arguments)
        return tool_result(await spec.run(principal, parsed))
    except ApiError as exc:
        return tool_error(exc.code, exc.message, exc.field, exc.details)
    except (OperationalError, PoolTimeoutError, DBAPIError) as exc:
        log.warning("database_unavailable", tool=spec.name, error=type(exc).__name__)
        retry = {"retry_after_seconds": get_settings().api_retry_after_seconds}
        return tool_error(
            "upstream_unavailable", "the database is unavailable; retry later", None, retry
        )
    except Exception as exc:
        log.exception("mcp_tool_failed", tool=spec.name, error=type(exc).__name__)
        return tool_error("internal", "internal error")


def build_server(credentials: CredentialSource) -> Server[Any]:
    """A low-level MCP server offering every registered tool."""

    async def list_tools(
        _ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        with_output = output_schemas_enabled()
        return types.ListToolsResult(tools=[describe(s, with_output) for s in REGISTRY.values()])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        spec = REGISTRY.get(params.name)
        if spec is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown tool: {params.name}")
        return await call(spec, credentials(ctx), dict(params.arguments or {}))

    return Server(
        SERVER_NAME,
        version=_version(),
        instructions="Evidence retrieval: bounded public fetches turned into citable evidence.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _version() -> str:
    try:
        return metadata.version("evidence-retrieval")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def run_stdio() -> None:
    """Serve MCP over this process's stdin and stdout until stdin closes."""
    server = build_server(stdio_credentials)

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(serve)


def http_app(host: str = "127.0.0.1") -> ASGIApp:
    """The streamable HTTP app (endpoint `/mcp`), each call authenticated by its Bearer key.

    Stateless: no session outlives its request. `initialize` needs no key, and the SDK kept
    every session it opened (up to 10 000, for 30 minutes): keyless clients could fill the table
    and leave keyed ones with 503 "Too many open sessions". Every call authenticates itself
    anyway and no tool sends requests back to the client, so sessions held nothing we need.
    Bodies are bounded as the API bounds them (EVIDENCE_MAX_BODY_BYTES), and then to what a
    message can legitimately hold (`MESSAGE_BOUNDS`) before the SDK parses them: a keyless
    body of 300 000 argument keys cost seconds of CPU there, stalling keyed calls.
    """
    limit = get_settings().max_body_bytes
    app = build_server(http_credentials).streamable_http_app(
        host=host, stateless_http=True, max_request_body_size=limit
    )
    return BodyLimit(BoundedBodies(NoStandaloneStream(app), message_rule, principal_for))


def message_rule(scope: Scope) -> Rule | None:
    """The bounds of a POSTed MCP message (other requests pass as they are)."""
    if scope["method"] != "POST" or scope["path"].rstrip("/") != MCP_PATH:
        return None
    return Rule(MESSAGE_BOUNDS, MCP_PATH, keyless_bytes=KEYLESS_BYTES)


class NoStandaloneStream:
    """Answer `GET /mcp` with 405, as the transport allows for a server that offers no stream.

    Stateless, the SDK would open a server-to-client event stream for any GET, keyless too, on
    which nothing is ever sent, and hold its connection for as long as the client likes.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            body = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": types.INVALID_REQUEST, "message": "Method Not Allowed"},
            }
            response = JSONResponse(body, status_code=405, headers={"Allow": "POST"})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def run_http(host: str, port: int) -> None:
    """Serve MCP over streamable HTTP at http://HOST:PORT/mcp."""

    serving.run(http_app(host), host=host, port=port, log_level="warning")
