"""Report ids per workspace: a counter row per workspace instead of one sequence for all.

With one sequence, the gap between two report ids a workspace received told it how many
evidence items the other workspaces stored meanwhile. From here on each workspace numbers its
own items 1, 2, 3, … from its row in `workspace_report_counter`.

Existing report ids are kept, not renumbered: a report id is promised to be stable, and people
and agents cite it, so renumbering would silently point those citations at other items. The old
ids are unique across the system, hence within each workspace; each workspace's counter starts
at its highest existing id, so its next item gets the next number after its own last one. The
gaps among ids handed out before this migration remain as they were; no new ones arise.

Downgrade goes back to one sequence and has to renumber every item (in creation order), since
per-workspace ids repeat across workspaces.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "workspace_report_counter",
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("last_report_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("workspace_id", name="pk_workspace_report_counter"),
    )
    # A new table rather than ALTERs: the primary key moves from report_id to evidence_id, which
    # SQLite cannot alter in place, and PostgreSQL's serial default must go as well.
    op.create_table(
        "evidence_report_v3",
        sa.Column("evidence_id", sa.Uuid(), nullable=False),
        sa.Column("workspace_id", sa.Uuid(), nullable=False),
        sa.Column("report_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["evidence_id"], ["evidence.id"], name="fk_evidence_report_evidence"
        ),
        sa.PrimaryKeyConstraint("evidence_id", name="pk_evidence_report"),
        sa.UniqueConstraint("workspace_id", "report_id", name="uq_report_in_workspace"),
    )
    op.execute(
        "INSERT INTO evidence_report_v3 (evidence_id, workspace_id, report_id) "
        "SELECT r.evidence_id, e.workspace_id, r.report_id "
        "FROM evidence_report r JOIN evidence e ON e.id = r.evidence_id"
    )
    op.execute(
        "INSERT INTO workspace_report_counter (workspace_id, last_report_id) "
        "SELECT workspace_id, MAX(report_id) FROM evidence_report_v3 GROUP BY workspace_id"
    )
    op.drop_table("evidence_report")
    op.rename_table("evidence_report_v3", "evidence_report")


def downgrade() -> None:
    op.create_table(
        "evidence_report_v2",
        sa.Column("report_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("evidence_id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(["evidence_id"], ["evidence.id"]),
        sa.PrimaryKeyConstraint("report_id"),
        sa.UniqueConstraint("evidence_id"),
        sqlite_autoincrement=True,
    )
    op.execute(
        "INSERT INTO evidence_report_v2 (evidence_id) "
        "SELECT r.evidence_id FROM evidence_report r JOIN evidence e ON e.id = r.evidence_id "
        "ORDER BY e.created_at, r.workspace_id, r.report_id"
    )
    op.drop_table("evidence_report")
    op.drop_table("workspace_report_counter")
    op.rename_table("evidence_report_v2", "evidence_report")
