"""The archive's index: where each archived HTTP exchange lies in the WARC files.

Revision ID: 0013_archive_records
Revises: 0012_watches
Create Date: 2026-12-05 05:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_archive_records"
down_revision: str | None = "0012_watches"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "archive_record",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("retrieval_id", sa.Uuid(), nullable=False),
        sa.Column("evidence_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("fetched_at", INSTANT, nullable=False),
        sa.Column("record_type", sa.String(length=16), nullable=False),
        sa.Column("record_id", sa.String(length=64), nullable=False),
        sa.Column("payload_digest", sa.String(length=64), nullable=False),
        sa.Column("refers_to", sa.String(length=64), nullable=True),
        sa.Column("file", sa.String(length=255), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("length", sa.BigInteger(), nullable=False),
        sa.Column("group_bytes", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_archive_record_digest", "archive_record", ["workspace_id", "payload_digest"]
    )
    op.create_index("ix_archive_record_revision", "archive_record", ["evidence_id", "revision"])
    op.create_index("ix_archive_record_fetched", "archive_record", ["fetched_at"])
    op.create_index("ix_archive_record_file", "archive_record", ["file"])


def downgrade() -> None:
    op.drop_index("ix_archive_record_file", table_name="archive_record")
    op.drop_index("ix_archive_record_fetched", table_name="archive_record")
    op.drop_index("ix_archive_record_revision", table_name="archive_record")
    op.drop_index("ix_archive_record_digest", table_name="archive_record")
    op.drop_table("archive_record")
