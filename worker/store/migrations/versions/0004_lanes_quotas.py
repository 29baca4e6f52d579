"""Fair sharing: the retrieval's lane, the batch round-robin's memory, per-workspace quotas.

Existing rows become `interactive` (what they were: one FIFO queue). Two partial indexes serve
the batch claim (workspaces with pending batch work, oldest first) and per-workspace open counts.

Revision ID: 0004_lanes
Revises: 0003
Create Date: 2026-12-01 00:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_lanes"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH_PENDING_SQL = "lane = 'batch' AND state = 'pending'"
OPEN_SQL = "state IN ('pending', 'running')"


def upgrade() -> None:
    with op.batch_alter_table("retrieval") as batch_op:
        batch_op.add_column(
            sa.Column("lane", sa.String(length=16), server_default="interactive", nullable=False)
        )
    op.create_index(
        "ix_retrieval_batch_pending",
        "retrieval",
        ["workspace_id", "created_at"],
        postgresql_where=sa.text(BATCH_PENDING_SQL),
        sqlite_where=sa.text(BATCH_PENDING_SQL),
    )
    op.create_index(
        "ix_retrieval_workspace_open",
        "retrieval",
        ["workspace_id", "lane"],
        postgresql_where=sa.text(OPEN_SQL),
        sqlite_where=sa.text(OPEN_SQL),
    )
    op.create_table(
        "batch_schedule",
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("served_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("workspace_id"),
    )
    op.create_table(
        "workspace_quota",
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("open_retrievals", sa.Integer(), nullable=True),
        sa.Column("write_rate", sa.Float(), nullable=True),
        sa.Column("write_burst", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("workspace_id"),
    )


def downgrade() -> None:
    op.drop_table("workspace_quota")
    op.drop_table("batch_schedule")
    op.drop_index("ix_retrieval_workspace_open", table_name="retrieval")
    op.drop_index("ix_retrieval_batch_pending", table_name="retrieval")
    with op.batch_alter_table("retrieval") as batch_op:
        batch_op.drop_column("lane")
