"""Alembic environment: migrate the database named by EVIDENCE_DATABASE_URL."""

from alembic import context
from sqlmodel import SQLModel

import worker.store.models
import worker.store.read_models  # noqa: F401
from worker.platform.settings import get_settings
from worker.store.db import make_engine

config = context.config
target_metadata = SQLModel.metadata


def _include_object(_obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    """Leave the hand-written full-text objects of migration 0002 out of autogenerate."""
    if type_ == "table" and reflected and compare_to is None and "_fts" in (name or ""):
        return False
    return not (type_ in ("column", "index") and (name or "").endswith("tsv"))


def run_migrations() -> None:
    url = config.attributes.get("database_url") or get_settings().database_url
    engine = make_engine(url)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
            include_object=_include_object,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations()
