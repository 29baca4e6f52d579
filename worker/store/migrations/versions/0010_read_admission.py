"""Per-workspace overrides of the read rate (`evidence quotas set --read-rate --read-burst`).

NULL is the setting's default (EVIDENCE_QUOTA_READ_RATE, _READ_BURST), so existing rows keep it.

Revision ID: 0010_read_admission
Revises: 0009_key_lifecycle
Create Date: 2026-12-05 01:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_read_admission"
down_revision: str | None = "0009_key_lifecycle"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workspace_quota") as batch_op:
        batch_op.add_column(sa.Column("read_rate", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("read_burst", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workspace_quota") as batch_op:
        batch_op.drop_column("read_burst")
        batch_op.drop_column("read_rate")
