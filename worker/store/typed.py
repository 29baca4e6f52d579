"""Typed access to what SQLModel's and SQLAlchemy's annotations leave out."""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa
from sqlmodel import SQLModel


def table_of(model: type[SQLModel]) -> sa.Table:
    """The Core table of a table model (SQLModel sets `__table__` but does not declare it).

    The mapper's `local_table` is typed as any FROM clause; a table model's is its Table.
    """
    return cast(sa.Table, sa.inspect(model).local_table)


def rowcount(result: sa.Result[Any]) -> int:
    """Rows an UPDATE or DELETE matched: `Session.execute` returns its CursorResult as a Result."""
    return cast("sa.CursorResult[Any]", result).rowcount
