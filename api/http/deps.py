"""Dependencies as named aliases: a database session and the authenticated principal."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.auth import Principal, authenticate, cached_principal
from worker.store.db import read_session


@contextlib.contextmanager
def read_only_session() -> Iterator[Session]:
    """A read-only session, closed at the end.

    A read-only session never commits: closing rolls back, and a connection the database
    dropped meanwhile must not fail a response that has already been computed.
    """
    session = read_session()
    try:
        yield session
    finally:
        with contextlib.suppress(DBAPIError):
            session.close()


def _session() -> Iterator[Session]:
    with read_only_session() as session:
        yield session


#: A read-only session for the request; writes go through `worker.store.db.with_transient_retry`.
SessionDep = Annotated[Session, Depends(_session)]


def _authenticate(authorization: str | None) -> Principal:
    with read_only_session() as session:
        return authenticate(session, authorization)


#: The Bearer scheme as the OpenAPI document names it. It only declares the scheme: the header
#: is checked below, so a missing or malformed one is the envelope's 401, not FastAPI's 403.
BEARER_SCHEME = "bearer"
bearer = HTTPBearer(
    scheme_name=BEARER_SCHEME,
    bearerFormat="evk_…",
    description="An API key from `evidence keys create`, sent as `Authorization: Bearer <key>`.",
    auto_error=False,
)


async def principal_for(authorization: str | None) -> Principal:
    """The principal of an `Authorization` header value; ApiError (401) when there is none."""
    # A key verified in the last few seconds is answered in the event loop; only a cache miss
    # costs a worker thread and a database read (each thread hop costs about as much CPU as
    # the read itself, and the retrieval routes are polled hundreds of times a second).
    principal = cached_principal(authorization)
    if principal is None:
        principal = await run_in_threadpool(_authenticate, authorization)
    return principal


async def _principal(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]
) -> Principal:
    return await principal_for(request.headers.get("authorization"))


PrincipalDep = Annotated[Principal, Depends(_principal)]
