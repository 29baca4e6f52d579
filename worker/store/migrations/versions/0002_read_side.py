"""Read side: report ids, passages and images with full-text search, briefs with revisions.

Full-text search per dialect: PostgreSQL keeps a `tsv` tsvector (language-aware configuration
per row, set by a trigger) with a GIN index; SQLite keeps FTS5 external-content tables in step
with triggers. Rows are only ever inserted (revisions are immutable), so insert triggers suffice.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 09:05:24.087615
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: (table, FTS5 table, searchable SQL expression over NEW, PostgreSQL trigger function)
FTS_TABLES = (
    ("evidence_chunk", "evidence_chunk_fts", "NEW.text", "evidence_chunk_tsv"),
    (
        "evidence_image",
        "evidence_image_fts",
        "NEW.caption || ' ' || NEW.alt",
        "evidence_image_tsv",
    ),
)
FTS5_TOKENIZER = "porter unicode61 remove_diacritics 2"


def _revision_fk() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["evidence_id", "revision"],
        ["evidence_revision.evidence_id", "evidence_revision.revision"],
    )


def _tables() -> None:
    op.create_table(
        "evidence_report",
        sa.Column("report_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("evidence_id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(["evidence_id"], ["evidence.id"]),
        sa.PrimaryKeyConstraint("report_id"),
        sa.UniqueConstraint("evidence_id"),
        sqlite_autoincrement=True,
    )
    op.execute(
        "INSERT INTO evidence_report (evidence_id) SELECT id FROM evidence ORDER BY created_at, id"
    )
    op.create_table(
        "evidence_chunk",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("chunk_id", sa.String(length=40), nullable=False),
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("evidence_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("start_ms", sa.Integer(), nullable=True),
        sa.Column("end_ms", sa.Integer(), nullable=True),
        sa.Column("ts_config", sa.String(length=32), nullable=False),
        _revision_fk(),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("chunk_id"),
        sa.UniqueConstraint("evidence_id", "revision", "ordinal", name="uq_chunk_position"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_chunk_workspace", "evidence_chunk", ["workspace_id"])
    op.create_table(
        "evidence_image",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("image_id", sa.String(length=40), nullable=False),
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("evidence_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("caption", sa.Text(), nullable=False),
        sa.Column("alt", sa.Text(), nullable=False),
        sa.Column("copyright", sa.Text(), nullable=True),
        sa.Column("format", sa.String(length=8), nullable=True),
        sa.Column("ts_config", sa.String(length=32), nullable=False),
        _revision_fk(),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("image_id"),
        sa.UniqueConstraint("evidence_id", "revision", "ordinal", name="uq_image_position"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_image_workspace", "evidence_image", ["workspace_id"])
    op.create_table(
        "brief",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("latest_revision", sa.Integer(), nullable=False),
        sa.Column("reviewed_revision", sa.Integer(), nullable=True),
        sa.Column("archived", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_brief_workspace", "brief", ["workspace_id"])
    op.create_table(
        "brief_revision",
        sa.Column("brief_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["brief_id"], ["brief.id"]),
        sa.PrimaryKeyConstraint("brief_id", "revision"),
    )


def _postgres_fts() -> None:
    for table, _fts, expression, function in FTS_TABLES:
        op.execute(f"ALTER TABLE {table} ADD COLUMN tsv tsvector")
        op.execute(
            f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"NEW.tsv := to_tsvector(NEW.ts_config::regconfig, {expression}); RETURN NEW; END $$"
        )
        op.execute(
            f"CREATE TRIGGER {table}_tsv BEFORE INSERT OR UPDATE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {function}()"
        )
        op.execute(f"CREATE INDEX ix_{table}_tsv ON {table} USING gin (tsv)")


def _sqlite_fts() -> None:
    for table, fts, expression, _function in FTS_TABLES:
        op.execute(
            f"CREATE VIRTUAL TABLE {fts} USING fts5(body, content='', tokenize='{FTS5_TOKENIZER}')"
        )
        op.execute(
            f"CREATE TRIGGER {table}_fts AFTER INSERT ON {table} BEGIN "
            f"INSERT INTO {fts}(rowid, body) VALUES (NEW.seq, {expression}); END"
        )


def upgrade() -> None:
    _tables()
    if op.get_bind().dialect.name == "postgresql":
        _postgres_fts()
    else:
        _sqlite_fts()


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table, _fts, _expression, function in FTS_TABLES:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_tsv ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS {function}()")
    else:
        for table, fts, _expression, _function in FTS_TABLES:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_fts")
            op.execute(f"DROP TABLE IF EXISTS {fts}")
    op.drop_table("brief_revision")
    op.drop_index("ix_brief_workspace", "brief")
    op.drop_table("brief")
    op.drop_index("ix_image_workspace", "evidence_image")
    op.drop_table("evidence_image")
    op.drop_index("ix_chunk_workspace", "evidence_chunk")
    op.drop_table("evidence_chunk")
    op.drop_table("evidence_report")
