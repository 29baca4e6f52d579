"""Tables of the read side: report ids, passages, images, and briefs with revisions.

Full-text columns are not modelled here: migration 0002 adds them per dialect (a `tsv`
tsvector kept by a trigger on PostgreSQL, FTS5 tables kept by triggers on SQLite).
"""

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from worker.store.models import UTC_DATETIME


class EvidenceReport(SQLModel, table=True):
    """The stable integer id (`report_id`) of an evidence item, numbered within its workspace.

    Numbers come from the workspace's row in `workspace_report_counter`, so one workspace's ids
    say nothing about how much the others store (migration 0003).
    """

    __tablename__ = "evidence_report"
    __table_args__ = (
        sa.UniqueConstraint("workspace_id", "report_id", name="uq_report_in_workspace"),
    )

    evidence_id: uuid.UUID = Field(
        sa_column=sa.Column(
            sa.Uuid,
            sa.ForeignKey("evidence.id", name="fk_evidence_report_evidence"),
            primary_key=True,
        )
    )
    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    report_id: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))


class WorkspaceReportCounter(SQLModel, table=True):
    """The last report id a workspace handed out."""

    __tablename__ = "workspace_report_counter"

    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, primary_key=True))
    last_report_id: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))


class EvidenceChunk(SQLModel, table=True):
    """One passage of an evidence revision (immutable, as the revision is)."""

    __tablename__ = "evidence_chunk"
    __table_args__ = (
        sa.ForeignKeyConstraint(
            ["evidence_id", "revision"],
            ["evidence_revision.evidence_id", "evidence_revision.revision"],
        ),
        sa.UniqueConstraint("evidence_id", "revision", "ordinal", name="uq_chunk_position"),
        sa.Index("ix_chunk_workspace", "workspace_id"),
        {"sqlite_autoincrement": True},
    )

    #: Integer key the full-text index refers to (FTS5 rowid).
    seq: int | None = Field(
        default=None, sa_column=sa.Column(sa.Integer, primary_key=True, autoincrement=True)
    )
    chunk_id: str = Field(sa_column=sa.Column(sa.String(40), nullable=False, unique=True))
    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    evidence_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    revision: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    ordinal: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    text: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    start_ms: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    end_ms: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    #: Where the passage is in the revision's text, `[char_start, char_end)` in code points
    #: (NULL for passages recorded before anchors, migration 0011).
    char_start: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    char_end: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    #: PostgreSQL text-search configuration for this passage's language ("simple" if unknown).
    ts_config: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))


class EvidenceImage(SQLModel, table=True):
    """An image a retrieved page showed, with its caption and credit."""

    __tablename__ = "evidence_image"
    __table_args__ = (
        sa.ForeignKeyConstraint(
            ["evidence_id", "revision"],
            ["evidence_revision.evidence_id", "evidence_revision.revision"],
        ),
        sa.UniqueConstraint("evidence_id", "revision", "ordinal", name="uq_image_position"),
        sa.Index("ix_image_workspace", "workspace_id"),
        {"sqlite_autoincrement": True},
    )

    seq: int | None = Field(
        default=None, sa_column=sa.Column(sa.Integer, primary_key=True, autoincrement=True)
    )
    image_id: str = Field(sa_column=sa.Column(sa.String(40), nullable=False, unique=True))
    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    evidence_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    revision: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    ordinal: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    url: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    caption: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    alt: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    copyright: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    #: Format the URL suggests (png, jpeg, webp); bytes are checked when fetched.
    format: str | None = Field(default=None, sa_column=sa.Column(sa.String(8)))
    ts_config: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))


class Brief(SQLModel, table=True):
    """A research brief: its latest revision and workflow flags."""

    __tablename__ = "brief"
    __table_args__ = (sa.Index("ix_brief_workspace", "workspace_id"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    latest_revision: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    reviewed_revision: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    archived: bool = Field(
        sa_column=sa.Column(sa.Boolean, nullable=False, server_default=sa.false())
    )
    created_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
    updated_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))


class BriefRevision(SQLModel, table=True):
    """One immutable version of a brief's content."""

    __tablename__ = "brief_revision"

    brief_id: uuid.UUID = Field(
        sa_column=sa.Column(sa.Uuid, sa.ForeignKey("brief.id"), primary_key=True)
    )
    revision: int = Field(sa_column=sa.Column(sa.Integer, primary_key=True))
    content: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    created_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
