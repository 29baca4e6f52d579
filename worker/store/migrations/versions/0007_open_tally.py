"""An upper bound of each workspace's open retrievals, so the quota check rarely counts them.

`open_tally` holds, per workspace, the open rows at the last exact count (`counted`) and the
rows recorded since (`added`). A workspace without a row is counted exactly on its next
retrieval, so nothing needs backfilling.

Revision ID: 0007_open_tally
Revises: 0006_freshness
Create Date: 2026-12-01 07:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_open_tally"
down_revision: str | None = "0006_freshness"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "open_tally",
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("counted", sa.Integer(), nullable=False),
        sa.Column("added", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("workspace_id"),
    )


def downgrade() -> None:
    op.drop_table("open_tally")
