"""Dependencies as named aliases: a database session and the authenticated principal."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header
from sqlalchemy.orm import Session

from api.auth import Principal, authenticate
from worker.db import session_scope


def _session() -> Iterator[Session]:
    with session_scope(readonly=True) as session:
        yield session


#: A read-only session for the request; writes go through `worker.db.with_transient_retry`.
SessionDep = Annotated[Session, Depends(_session)]


def _principal(
    session: SessionDep, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    return authenticate(session, authorization)


PrincipalDep = Annotated[Principal, Depends(_principal)]
