"""API keys: an optional expiry and the time of last use.

Revocation reuses `revoked_at`, which may now lie in the future (a rotation's grace period).

Revision ID: 0009_key_lifecycle
Revises: 0008_open_tally_shards
Create Date: 2026-12-04 21:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_key_lifecycle"
down_revision: str | None = "0008_open_tally_shards"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_key") as batch_op:
        batch_op.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_key") as batch_op:
        batch_op.drop_column("last_used_at")
        batch_op.drop_column("expires_at")
