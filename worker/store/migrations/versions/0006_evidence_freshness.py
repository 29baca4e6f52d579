"""Fresh evidence cheaply: validators per requested URL, last confirmation, reuse windows.

`evidence_source` remembers, per requested URL (workspace, kind, normalised requested URL,
requested language), the revision it last led to, the validators (ETag, Last-Modified) of every
URL the pipeline fetched for it, and the result's status, reason and warnings, so a later
retrieval can revalidate before fetching (`fetched_at`: when the row was last written).
`evidence_revision.confirmed_at` is when the revision's content was last fetched or confirmed
(NULL: not since it was first seen).
`retrieval.max_age_seconds` is the client's reuse window (`Cache-Control: max-age=N`).

Revision ID: 0006_freshness
Revises: 0005_webhooks
Create Date: 2026-12-01 03:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_freshness"
down_revision: str | None = "0005_webhooks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("retrieval") as batch_op:
        batch_op.add_column(sa.Column("max_age_seconds", sa.Integer(), nullable=True))
    with op.batch_alter_table("evidence_revision") as batch_op:
        batch_op.add_column(sa.Column("confirmed_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "evidence_source",
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("url_key", sa.Text(), nullable=False),
        sa.Column("language", sa.String(length=35), server_default="", nullable=False),
        sa.Column("evidence_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("validators", sa.JSON(), nullable=False),
        sa.Column("outcome", sa.JSON(), nullable=False),
        sa.Column("fetched_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["evidence_id"], ["evidence.id"]),
        sa.PrimaryKeyConstraint("workspace_id", "kind", "url_key", "language"),
    )


def downgrade() -> None:
    op.drop_table("evidence_source")
    with op.batch_alter_table("evidence_revision") as batch_op:
        batch_op.drop_column("confirmed_at")
    with op.batch_alter_table("retrieval") as batch_op:
        batch_op.drop_column("max_age_seconds")
