"""Webhooks: per-workspace endpoints and their deliveries (an outbox written by the settle).

Revision ID: 0005_webhooks
Revises: 0004_lanes
Create Date: 2026-12-01 03:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_webhooks"
down_revision: str | None = "0004_lanes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "webhook_endpoint",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("secret", sa.String(length=80), nullable=False),
        sa.Column("previous_secret", sa.String(length=80), nullable=True),
        sa.Column("previous_secret_until", INSTANT, nullable=True),
        sa.Column("failing_since", INSTANT, nullable=True),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.Column("updated_at", INSTANT, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhook_endpoint_workspace", "webhook_endpoint", ["workspace_id"])
    op.create_table(
        "webhook_delivery",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("endpoint_id", sa.Uuid(), nullable=False),
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("retrieval_id", sa.Uuid(), nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("lease_until", INSTANT, nullable=True),
        sa.Column("next_attempt_at", INSTANT, nullable=False),
        sa.Column("retry_until", INSTANT, nullable=False),
        sa.Column("published_at", INSTANT, nullable=True),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.Column("last_attempt_at", INSTANT, nullable=True),
        sa.Column("delivered_at", INSTANT, nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["endpoint_id"], ["webhook_endpoint.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "endpoint_id", "retrieval_id", "event_type", name="uq_webhook_delivery_event"
        ),
    )
    op.create_index("ix_webhook_delivery_due", "webhook_delivery", ["state", "next_attempt_at"])
    op.create_index(
        "ix_webhook_delivery_endpoint", "webhook_delivery", ["endpoint_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_delivery_endpoint", table_name="webhook_delivery")
    op.drop_index("ix_webhook_delivery_due", table_name="webhook_delivery")
    op.drop_table("webhook_delivery")
    op.drop_index("ix_webhook_endpoint_workspace", table_name="webhook_endpoint")
    op.drop_table("webhook_endpoint")
