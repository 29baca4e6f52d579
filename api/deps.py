"""Dependencies as named aliases: a database session and the authenticated principal."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from api.auth import Principal, authenticate
from worker.db import read_session


def _session() -> Iterator[Session]:
    # A read-only session never commits: closing rolls back, and a connection the database
    # dropped meanwhile must not fail a response that has already been computed.
    session = read_session()
    try:
        yield session
    finally:
        with contextlib.suppress(DBAPIError):
            session.close()


#: A read-only session for the request; writes go through `worker.db.with_transient_retry`.
SessionDep = Annotated[Session, Depends(_session)]


def _principal(
    session: SessionDep, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    return authenticate(session, authorization)


PrincipalDep = Annotated[Principal, Depends(_principal)]
