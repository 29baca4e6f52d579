"""Room under a workspace's open ceiling, without counting its open retrievals on every request.

The exact count reads every open row of the workspace (up to the ceiling, 10 000 by default):
under a backlog of thousands it cost milliseconds per request while the request held the
workspace's quota lock, so one busy workspace's requests queued behind each other. The tally
(`open_tally`) is an upper bound instead: the rows open at the last exact count plus every row
recorded since. Retrievals leave the open states (settle, cancel, expiry) without touching it,
so it can only over-estimate: while it shows room for a request, there is room. When it does
not, the exact count decides and starts it again, under the workspace's quota lock
(`retrievals.lock_workspace`). A single retrieval reserves after its insert, without that lock:
the tally row's own lock orders reservations, and is held only for the reservation and the
commit (the quota lock was held through the whole creating transaction, and a busy
workspace's requests queued on it). On PostgreSQL the reservation travels with the COMMIT in
one round trip (`reserve_and_commit`): the row lock lasts while the server commits, not while
the request's thread waits for the answer and then for the interpreter to send its COMMIT
(at 200 POSTs a second into one workspace, that wait queued the requests behind each other).
"""

from __future__ import annotations

import functools
import uuid

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.store import db
from worker.store.models import OPEN_SQL, OpenTally, Retrieval

TALLY: sa.Table = OpenTally.__table__  # type: ignore[attr-defined]
RETRIEVAL: sa.Table = Retrieval.__table__  # type: ignore[attr-defined]

#: Take `b_n` more from the bound if they fit under the ceiling; a row back means they do.
_RESERVE = (
    sa.update(TALLY)
    .where(
        TALLY.c.workspace_id == sa.bindparam("b_workspace"),
        TALLY.c.counted + TALLY.c.added + sa.bindparam("b_n", type_=sa.Integer)
        <= sa.bindparam("b_limit", type_=sa.Integer),
    )
    .values(added=TALLY.c.added + sa.bindparam("b_n", type_=sa.Integer))
    .returning(TALLY.c.added)
)
_LOCK_ROW = (
    sa.select(TALLY.c.counted)
    .where(TALLY.c.workspace_id == sa.bindparam("b_workspace"))
    .with_for_update()
)
_FORGET = sa.delete(TALLY).where(TALLY.c.workspace_id == sa.bindparam("b_workspace"))
_OPEN_ROWS = (
    sa.select(sa.literal(1))
    .where(RETRIEVAL.c.workspace_id == sa.bindparam("b_workspace"), sa.text(OPEN_SQL))
    .limit(sa.bindparam("b_cap", type_=sa.Integer))
    .subquery()
)
_COUNT_OPEN = sa.select(sa.func.count()).select_from(_OPEN_ROWS)


@functools.cache
def _restart(dialect: str) -> sa.Insert:
    stmt = db.insert_for(dialect)(TALLY).values(
        workspace_id=sa.bindparam("b_workspace"),
        counted=sa.bindparam("b_counted"),
        added=sa.bindparam("b_added"),
    )
    return stmt.on_conflict_do_update(
        index_elements=["workspace_id"],
        set_={"counted": stmt.excluded.counted, "added": stmt.excluded.added},
    )


def reserve(session: Session, workspace_id: uuid.UUID, wanted: int, open_limit: int) -> bool:
    """Add `wanted` to the tally if the bound stays within `open_limit`; False when it would
    not (or the workspace has no tally yet): then only `recount` decides.

    Needs no workspace lock: the UPDATE takes the tally row's lock until the commit, so
    reservations of one workspace follow each other, each seeing the one before.
    """
    params = {"b_workspace": workspace_id, "b_n": wanted, "b_limit": open_limit}
    return session.execute(_RESERVE, params).first() is not None


class NoRoomAtCommit(Exception):
    """`reserve_and_commit` found no room (or no tally): the transaction was rolled back."""


#: The SQLSTATE the reservation raises to stop its COMMIT (a class of codes PostgreSQL leaves
#: to applications).
NO_ROOM_SQLSTATE = "EV001"
_RESERVE_AND_COMMIT = (
    "DO $$BEGIN"
    " UPDATE open_tally SET added = added + {n}"
    " WHERE workspace_id = '{workspace}' AND counted + added + {n} <= {limit};"
    " IF NOT FOUND THEN RAISE EXCEPTION 'no room under the open ceiling'"
    " USING ERRCODE = '" + NO_ROOM_SQLSTATE + "'; END IF;"
    " END$$; COMMIT"
)


def reserve_and_commit(
    session: Session, workspace_id: uuid.UUID, wanted: int, open_limit: int
) -> None:
    """PostgreSQL: `reserve`, then commit the session's transaction, in one round trip.

    Both statements go as one simple query (literals, not parameters: the protocol that takes
    parameters takes one statement); the workspace is a UUID and the numbers integers, formatted
    as such. No room: the reservation raises, the COMMIT is skipped, and `NoRoomAtCommit` rolls
    the transaction back: decide again with `recount`, in a new transaction.
    """
    statement = _RESERVE_AND_COMMIT.format(
        n=int(wanted), workspace=uuid.UUID(str(workspace_id)), limit=int(open_limit)
    )
    try:
        session.connection().exec_driver_sql(statement)
    except sa.exc.DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != NO_ROOM_SQLSTATE:
            raise
        raise NoRoomAtCommit from None  # the session's transaction rolls back as it ends


def recount(
    session: Session, workspace_id: uuid.UUID, wanted: int, open_limit: int, own: int = 0
) -> int:
    """How many of `wanted` fit under `open_limit`, from an exact count, and start the tally
    again from it; `own`: rows this transaction recorded already (the count sees them).

    The caller holds the workspace's quota lock. The tally row is locked first, so the count
    runs after every transaction that reserved in it has ended and sees their rows; one that
    recorded a row but has not reserved yet reserves after the new start, on top of it.
    """
    session.execute(_LOCK_ROW, {"b_workspace": workspace_id}).first()
    others = count(session, workspace_id, open_limit + own) - own
    if others >= open_limit:
        # Counted to the ceiling: "at least that many", too low for a bound. Keep none, so a
        # raised ceiling is counted afresh (at the ceiling every request counts anyway).
        session.execute(_FORGET, {"b_workspace": workspace_id})
        return 0
    fits = min(wanted, open_limit - others)
    session.execute(
        _restart(db.dialect(session)),
        {"b_workspace": workspace_id, "b_counted": others, "b_added": fits},
    )
    return fits


def room(session: Session, workspace_id: uuid.UUID, wanted: int, open_limit: int) -> int:
    """How many of `wanted` new retrievals fit under `open_limit` open ones; that many are
    added to the tally (record at most that many; recording fewer only over-estimates). The
    caller holds the workspace's quota lock."""
    if wanted <= 0:
        return 0
    if reserve(session, workspace_id, wanted, open_limit):
        return wanted
    return recount(session, workspace_id, wanted, open_limit)


_BOUND = sa.select(TALLY.c.counted + TALLY.c.added).where(
    TALLY.c.workspace_id == sa.bindparam("b_workspace")
)


def fits(session: Session, workspace_id: uuid.UUID, open_limit: int) -> bool:
    """Whether one more retrieval would fit under `open_limit`, taking nothing from the tally."""
    bound = session.execute(_BOUND, {"b_workspace": workspace_id}).scalar_one_or_none()
    if bound is not None and bound < open_limit:
        return True
    return count(session, workspace_id, open_limit) < open_limit


def count(session: Session, workspace_id: uuid.UUID, cap: int) -> int:
    """The workspace's open retrievals, exactly, counting at most `cap` rows."""
    return int(
        session.execute(_COUNT_OPEN, {"b_workspace": workspace_id, "b_cap": cap}).scalar_one()
    )
