"""Room under a workspace's open ceiling, without counting its open retrievals on every request.

The exact count reads every open row of the workspace (up to the ceiling, 10 000 by default):
under a backlog of thousands it cost milliseconds per request while the request held the
workspace's quota lock, so one busy workspace's requests queued behind each other. The tally
(`open_tally`) is an upper bound instead: the rows open at the last exact count plus every row
recorded since. Retrievals leave the open states (settle, cancel, expiry) without touching it,
so it can only over-estimate: while it shows room for a request, there is room. When it does
not, the exact count decides and starts it again, under the workspace's quota lock
(`retrievals.lock_workspace`).

A workspace's tally is SHARDS rows, each allowed its share of the ceiling it was split under
(`share`), so the shards together never pass it. A single retrieval reserves after its insert,
without the quota lock, in one shard picked at random: that row's lock orders the
reservations made in it, and lasts until the commit. On PostgreSQL the reservation travels
with the COMMIT in one round trip (`reserve_and_commit`), so the row is locked only while the
server commits, and one workspace's concurrent requests mostly lock different rows: with one
row per workspace, its requests at 200 a second queued behind each other's commits.
"""

from __future__ import annotations

import functools
import random
import uuid

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.store import at_commit, db
from worker.store.models import OPEN_SQL, OpenTally, Retrieval

TALLY: sa.Table = OpenTally.__table__  # type: ignore[attr-defined]
RETRIEVAL: sa.Table = Retrieval.__table__  # type: ignore[attr-defined]

#: Rows of a workspace's tally. More spread one workspace's reservations wider; each shard
#: holds 1/SHARDS of the room, so an uneven spread reaches the exact count earlier.
SHARDS = 8


def share(shard: int, ceiling: int) -> int:
    """What `shard` may hold of `ceiling`: the shares add up to the ceiling exactly."""
    return ceiling // SHARDS + (1 if shard < ceiling % SHARDS else 0)


def split(counted: int, added: int, ceiling: int) -> list[tuple[int, int]]:
    """(counted, added) per shard for a tally of `counted + added` (at most `ceiling`), with
    the room left spread over the shards in proportion to their shares."""
    room = ceiling - counted - added
    shares = [share(s, ceiling) for s in range(SHARDS)]
    rooms = [room * part // ceiling if ceiling else 0 for part in shares]
    left = room - sum(rooms)  # what rounding left (fewer than SHARDS): one each, in turn
    for s in range(SHARDS):
        if left and rooms[s] < shares[s]:
            rooms[s] += 1
            left -= 1
    rows = []
    for part, free in zip(shares, rooms, strict=True):
        used = part - free
        mine = min(used, counted)
        counted -= mine
        rows.append((mine, used - mine))
    return rows


#: Take `b_n` more in one shard if they fit in its share of the ceiling it was split under;
#: a row back means they do.
_RESERVE = (
    sa.update(TALLY)
    .where(
        TALLY.c.workspace_id == sa.bindparam("b_workspace"),
        TALLY.c.shard == sa.bindparam("b_shard", type_=sa.Integer),
        TALLY.c.ceiling == sa.bindparam("b_limit", type_=sa.Integer),
        TALLY.c.counted + TALLY.c.added + sa.bindparam("b_n", type_=sa.Integer)
        <= sa.bindparam("b_share", type_=sa.Integer),
    )
    .values(added=TALLY.c.added + sa.bindparam("b_n", type_=sa.Integer))
    .returning(TALLY.c.added)
)
_LOCK_ROWS = (
    sa.select(TALLY.c.shard)
    .where(TALLY.c.workspace_id == sa.bindparam("b_workspace"))
    .order_by(TALLY.c.shard)
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
        shard=sa.bindparam("b_shard"),
        counted=sa.bindparam("b_counted"),
        added=sa.bindparam("b_added"),
        ceiling=sa.bindparam("b_limit"),
    )
    return stmt.on_conflict_do_update(
        index_elements=["workspace_id", "shard"],
        set_={
            "counted": stmt.excluded.counted,
            "added": stmt.excluded.added,
            "ceiling": stmt.excluded.ceiling,
        },
    )


def _pick() -> int:
    return random.randrange(SHARDS)


def reserve(session: Session, workspace_id: uuid.UUID, wanted: int, open_limit: int) -> bool:
    """Add `wanted` to one shard of the tally, picked at random, if it stays within its share
    of `open_limit`; False when it would not, or the workspace has no tally split under this
    ceiling (then only `recount` decides).

    Needs no workspace lock: the UPDATE takes the shard row's lock until the commit, so
    reservations in one shard follow each other, each seeing the one before.
    """
    shard = _pick()
    params = {
        "b_workspace": workspace_id,
        "b_shard": shard,
        "b_n": wanted,
        "b_limit": open_limit,
        "b_share": share(shard, open_limit),
    }
    return session.execute(_RESERVE, params).first() is not None


class NoRoomAtCommit(Exception):
    """`reserve_and_commit` found no room (or no tally): the transaction was rolled back."""


#: The SQLSTATE the reservation raises to stop its COMMIT (a class of codes PostgreSQL leaves
#: to applications).
NO_ROOM_SQLSTATE = "EV001"
_RESERVE_IN_BLOCK = (
    "UPDATE open_tally SET added = added + {n}"
    " WHERE workspace_id = '{workspace}' AND shard = {shard} AND ceiling = {limit}"
    " AND counted + added + {n} <= {share};"
    " IF NOT FOUND THEN RAISE EXCEPTION 'no room under the open ceiling'"
    " USING ERRCODE = '" + NO_ROOM_SQLSTATE + "'; END IF;"
)


def reserving_block(
    workspace_id: uuid.UUID, wanted: int, open_limit: int, if_row: uuid.UUID | None = None
) -> str:
    """PostgreSQL: a `DO` block that reserves like `reserve`, in a shard picked at random, and
    raises NO_ROOM_SQLSTATE (aborting its transaction) when it finds no room. With `if_row`, it
    reserves only if the transaction recorded the retrieval of that id.

    Literals, not parameters (a `DO` block takes none): the ids are UUIDs and the numbers
    integers, formatted as such.
    """
    shard = _pick()
    reserve = _RESERVE_IN_BLOCK.format(
        n=int(wanted),
        workspace=uuid.UUID(str(workspace_id)),
        shard=shard,
        limit=int(open_limit),
        share=share(shard, int(open_limit)),
    )
    if if_row is not None:
        row = uuid.UUID(str(if_row))
        reserve = f"IF EXISTS (SELECT 1 FROM retrieval WHERE id = '{row}') THEN {reserve} END IF;"
    return f"DO $$BEGIN {reserve} END$$"


def reserve_and_commit(
    session: Session, workspace_id: uuid.UUID, wanted: int, open_limit: int
) -> None:
    """PostgreSQL: `reserve`, then commit the session's transaction, in one round trip.

    Both statements go as one simple query (the protocol that takes parameters takes one
    statement). No room: the reservation raises, the COMMIT is skipped, and `NoRoomAtCommit`
    rolls the transaction back: decide again with `recount`, in a new transaction.
    """
    statement = reserving_block(workspace_id, wanted, open_limit) + "; COMMIT"
    at_commit.flush(session)  # what the session's commit would have written first
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
    again from it, split under `open_limit`; `own`: rows this transaction recorded already
    (the count sees them).

    The caller holds the workspace's quota lock. The tally's rows are locked first, so the
    count runs after every transaction that reserved in them has ended and sees their rows;
    one that recorded a row but has not reserved yet reserves after the new start, on top of
    it.
    """
    session.execute(_LOCK_ROWS, {"b_workspace": workspace_id}).all()
    others = count(session, workspace_id, open_limit + own) - own
    if others >= open_limit:
        # Counted to the ceiling: "at least that many", too low for a bound. Keep none, so a
        # raised ceiling is counted afresh (at the ceiling every request counts anyway).
        session.execute(_FORGET, {"b_workspace": workspace_id})
        return 0
    fits = min(wanted, open_limit - others)
    rows = [
        {
            "b_workspace": workspace_id,
            "b_shard": shard,
            "b_counted": counted,
            "b_added": added,
            "b_limit": open_limit,
        }
        for shard, (counted, added) in enumerate(split(others, fits, open_limit))
    ]
    session.execute(_restart(db.dialect(session)), rows)
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


_BOUND = sa.select(sa.func.sum(TALLY.c.counted + TALLY.c.added)).where(
    TALLY.c.workspace_id == sa.bindparam("b_workspace")
)


def bound(session: Session, workspace_id: uuid.UUID) -> int | None:
    """The tally's bound of the workspace's open retrievals; None when it has no tally."""
    total = session.execute(_BOUND, {"b_workspace": workspace_id}).scalar_one_or_none()
    return None if total is None else int(total)


def fits(session: Session, workspace_id: uuid.UUID, open_limit: int) -> bool:
    """Whether one more retrieval would fit under `open_limit`, taking nothing from the tally."""
    known = bound(session, workspace_id)
    if known is not None and known < open_limit:
        return True
    return count(session, workspace_id, open_limit) < open_limit


def count(session: Session, workspace_id: uuid.UUID, cap: int) -> int:
    """The workspace's open retrievals, exactly, counting at most `cap` rows."""
    return int(
        session.execute(_COUNT_OPEN, {"b_workspace": workspace_id, "b_cap": cap}).scalar_one()
    )
