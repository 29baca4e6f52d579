"""The error envelope `{"error": {"code", "message", "field"?, "details"?}}` and its handlers.

Every failure leaves the API through here, so no stack trace, SQL or secret reaches a client.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from worker.platform.settings import get_settings

log = structlog.get_logger(__name__)


class ApiError(Exception):
    """An error with its contract code and HTTP status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.field, self.details = field, details
        #: Seconds for the `Retry-After` header (429), when the error has one.
        self.retry_after = retry_after


def invalid_input(message: str, field: str | None = None, status: int = 400) -> ApiError:
    return ApiError(status, "invalid_input", message, field)


def not_entitled(message: str, status: int = 403) -> ApiError:
    return ApiError(status, "not_entitled", message)


def not_found(message: str = "not found") -> ApiError:
    return ApiError(404, "not_found", message)


def envelope(
    code: str, message: str, field: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The contract's error body."""
    error: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    if details:
        error["details"] = details
    return {"error": error}


def error_response(error: ApiError, headers: Mapping[str, str] | None = None) -> JSONResponse:
    extra = dict(headers or {})
    if error.status == 401:
        extra["WWW-Authenticate"] = "Bearer"
    if error.retry_after is not None:
        extra["Retry-After"] = str(error.retry_after)
    return JSONResponse(
        envelope(error.code, error.message, error.field, error.details),
        status_code=error.status,
        headers=extra or None,
    )


def unavailable_response() -> JSONResponse:
    retry_after = get_settings().api_retry_after_seconds
    return JSONResponse(
        envelope("upstream_unavailable", "the database is unavailable; retry later"),
        status_code=503,
        headers={"Retry-After": str(retry_after)},
    )


def _field_of(loc: tuple[Any, ...]) -> str | None:
    """The field an error is about, as the service names nested ones: `content.findings[0].id`."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f"{'.' if path else ''}{part}"
    return path or None


def _message(error: Mapping[str, Any], field: str | None) -> str:
    kind = error.get("type", "")
    if kind == "json_invalid":
        return "the request body is not valid JSON"
    if kind == "missing":
        return f"{field} is required"
    if kind == "extra_forbidden":
        return f"unknown field {field!r}"
    if kind in ("model_attributes_type", "dict_type"):
        return "the request body must be a JSON object"
    msg = str(error.get("msg", "invalid value"))
    return f"{field}: {msg}" if field else msg


def validation_error(errors: Sequence[Mapping[str, Any]], *, located: bool = False) -> ApiError:
    """The `invalid_input` error for pydantic validation errors, naming the first bad field.

    `located`: each `loc` starts with where FastAPI found the value ("body", "path", "query"),
    which is not part of the field's name.
    """
    first: Mapping[str, Any] = errors[0] if errors else {}
    loc = tuple(first.get("loc", ()))
    field = _field_of(loc[1:] if located else loc)
    if first.get("type") == "json_invalid":
        field = None
    return invalid_input(_message(first, field), field)


async def _on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
    return error_response(validation_error(exc.errors(), located=True))


async def _on_api_error(_: Request, exc: ApiError) -> JSONResponse:
    return error_response(exc)


def _routes(routes: Sequence[Any]) -> Iterator[Any]:
    """Every route, those of included routers too (FastAPI wraps each included router)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _routes(inner.routes)
        else:
            yield route


def _allowed_methods(request: Request) -> set[str]:
    """Every method some route serves at the request's path."""
    methods: set[str] = set()
    for route in _routes(request.app.router.routes):
        match, _ = route.matches(request.scope)
        if match is Match.PARTIAL:
            methods |= set(getattr(route, "methods", None) or ())
    return methods


async def _on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if exc.status_code == 404:
        return error_response(not_found())
    if exc.status_code == 405:
        # RFC 9110 requires `Allow` on a 405. Starlette names the methods of the first route
        # that matched the path only; a path served by several routes lists them all.
        headers = dict(exc.headers or {})
        allowed = _allowed_methods(request)
        if allowed:
            headers["Allow"] = ", ".join(sorted(allowed))
        return error_response(ApiError(405, "invalid_input", "method not allowed"), headers)
    return error_response(ApiError(exc.status_code, "invalid_input", str(exc.detail)), exc.headers)


async def _on_database(_: Request, exc: Exception) -> JSONResponse:
    log.warning("database_unavailable", error=type(exc).__name__)
    return unavailable_response()


async def _on_unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled_error", error=type(exc).__name__)
    return JSONResponse(envelope("internal", "internal error"), status_code=500)


def install(app: FastAPI) -> None:
    """Register every handler on `app`."""
    app.add_exception_handler(RequestValidationError, _on_validation)  # type: ignore[arg-type]
    app.add_exception_handler(ApiError, _on_api_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http)  # type: ignore[arg-type]
    for exc_type in (OperationalError, PoolTimeoutError, DBAPIError):
        app.add_exception_handler(exc_type, _on_database)
    app.add_exception_handler(Exception, _on_unexpected)
