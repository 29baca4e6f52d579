"""Alembic environment: migrate the database named by EVIDENCE_DATABASE_URL."""

from alembic import context
from sqlmodel import SQLModel

import worker.models  # noqa: F401  (registers the tables on SQLModel.metadata)
from worker.db import make_engine
from worker.settings import get_settings

config = context.config
target_metadata = SQLModel.metadata


def run_migrations() -> None:
    url = config.attributes.get("database_url") or get_settings().database_url
    engine = make_engine(url)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations()
