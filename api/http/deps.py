"""Dependencies as named aliases: a database session and the authenticated principal."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.auth import Principal, principal_for
from worker.store.db import read_only_session


def _session() -> Iterator[Session]:
    with read_only_session() as session:
        yield session


#: A read-only session for the request; writes go through `worker.store.db.with_transient_retry`.
SessionDep = Annotated[Session, Depends(_session)]


#: The Bearer scheme as the OpenAPI document names it. It only declares the scheme: the header
#: is checked below, so a missing or malformed one is the envelope's 401, not FastAPI's 403.
BEARER_SCHEME = "bearer"
bearer = HTTPBearer(
    scheme_name=BEARER_SCHEME,
    bearerFormat="evk_…",
    description="An API key from `evidence keys create`, sent as `Authorization: Bearer <key>`.",
    auto_error=False,
)


async def _principal(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]
) -> Principal:
    return await principal_for(request.headers.get("authorization"))


PrincipalDep = Annotated[Principal, Depends(_principal)]
