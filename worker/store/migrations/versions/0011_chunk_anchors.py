"""Chunk anchors: where each passage is in its revision's text (`char_start`, `char_end`).

Code points of the revision's text; the passage is that slice. Passages recorded before have
NULL anchors (their text was joined from paragraphs, not sliced) and are served with null ones.

Revision ID: 0011_chunk_anchors
Revises: 0010_read_admission
Create Date: 2026-12-05 04:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_chunk_anchors"
down_revision: str | None = "0010_read_admission"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (SQLite has it): a batch copy of the table would drop its FTS trigger.
    op.add_column("evidence_chunk", sa.Column("char_start", sa.Integer(), nullable=True))
    op.add_column("evidence_chunk", sa.Column("char_end", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("evidence_chunk", "char_end")
    op.drop_column("evidence_chunk", "char_start")
