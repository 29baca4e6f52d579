"""The open tally in shards: a workspace's single retrievals reserve in one of several rows.

One row per workspace made its concurrent requests wait for each other's commit. The tally
is a bound that is rebuilt from an exact count whenever a workspace has none, so the table is
made anew, empty, rather than converted.

Revision ID: 0008_open_tally_shards
Revises: 0007_open_tally
Create Date: 2026-12-02 06:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_open_tally_shards"
down_revision: str | None = "0007_open_tally"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_table("open_tally")
    op.create_table(
        "open_tally",
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("counted", sa.Integer(), nullable=False),
        sa.Column("added", sa.Integer(), nullable=False),
        sa.Column("ceiling", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("workspace_id", "shard"),
    )


def downgrade() -> None:
    op.drop_table("open_tally")
    op.create_table(
        "open_tally",
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("counted", sa.Integer(), nullable=False),
        sa.Column("added", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("workspace_id"),
    )
