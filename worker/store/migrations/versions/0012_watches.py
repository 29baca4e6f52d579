"""Watches: sources kept fresh on a schedule (docs/watches.md).

Revision ID: 0012_watches
Revises: 0011_chunk_anchors
Create Date: 2026-12-05 05:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_watches"
down_revision: str | None = "0011_chunk_anchors"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "watch",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("language", sa.String(length=35), server_default="", nullable=False),
        sa.Column("interval_seconds", sa.Integer(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("next_run_at", INSTANT, nullable=False),
        sa.Column("last_run_at", INSTANT, nullable=True),
        sa.Column("missed_runs", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_retrieval_id", sa.Uuid(), nullable=True),
        sa.Column("last_revision", sa.Integer(), nullable=True),
        sa.Column("failing", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.Column("updated_at", INSTANT, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_watch_workspace", "watch", ["workspace_id", "created_at"])
    op.create_index(
        "ix_watch_due",
        "watch",
        ["next_run_at"],
        postgresql_where=sa.text("enabled"),
        sqlite_where=sa.text("enabled"),
    )


def downgrade() -> None:
    op.drop_index("ix_watch_due", table_name="watch")
    op.drop_index("ix_watch_workspace", table_name="watch")
    op.drop_table("watch")
