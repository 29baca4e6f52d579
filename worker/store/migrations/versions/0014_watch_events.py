"""Watch events: what a watch last reported, and the stored body of non-retrieval webhook events.

`watch.reported_retrieval_id` is the run whose outcome the watch has announced (events are
recorded once per run); `webhook_delivery.payload` holds the `data` of events that are not a
retrieval as GET answers it (`evidence.changed`, `watch.failing`, `watch.recovered`).

Revision ID: 0014_watch_events
Revises: 0013_archive_records
Create Date: 2026-12-05 05:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_watch_events"
down_revision: str | None = "0013_archive_records"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (SQLite has it), as 0011.
    op.add_column("watch", sa.Column("reported_retrieval_id", sa.Uuid(), nullable=True))
    op.add_column("webhook_delivery", sa.Column("payload", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("webhook_delivery", "payload")
    op.drop_column("watch", "reported_retrieval_id")
