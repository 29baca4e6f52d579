"""The typed helpers over SQLModel and SQLAlchemy return what the untyped attributes hold."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.store.models import ApiKey, Retrieval
from worker.store.read_models import Brief, BriefRevision
from worker.store.typed import rowcount, table_of


def test_table_of_is_the_models_own_table() -> None:
    for model in (ApiKey, Retrieval, Brief, BriefRevision):
        table = table_of(model)
        assert isinstance(table, sa.Table)
        assert table is model.__table__  # type: ignore[attr-defined]


def test_rowcount_counts_the_rows_an_update_matched() -> None:
    engine = sa.create_engine("sqlite://")
    table = sa.Table("t", sa.MetaData(), sa.Column("n", sa.Integer))
    table.create(engine)
    with Session(engine) as session:
        session.execute(sa.insert(table), [{"n": 1}, {"n": 2}, {"n": 3}])
        assert rowcount(session.execute(sa.update(table).where(table.c.n >= 2).values(n=0))) == 2
        assert rowcount(session.execute(sa.delete(table).where(table.c.n == 9))) == 0
