"""Database tables (SQLModel). Alembic migrations in `worker/migrations` create them."""

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

UTC_DATETIME = sa.DateTime(timezone=True)
#: The largest revision number the INTEGER columns hold (PostgreSQL's is 32-bit). Callers may
#: ask for revisions up to 2^53-1 (the contract's bound); larger than this none can exist, and
#: binding one to an INTEGER comparison fails on PostgreSQL (it was answered as a 503).
MAX_STORED_REVISION = 2**31 - 1

#: The scheduling lanes (`Retrieval.lane`): a retrieval submitted alone is interactive and served
#: first; batch-route items share the batch lane round-robin across workspaces.
LANE_INTERACTIVE = "interactive"
LANE_BATCH = "batch"
LANES = (LANE_INTERACTIVE, LANE_BATCH)
#: Partial index predicates, as literal SQL: a planner only uses a partial index when the query
#: states the same condition, which a bound parameter cannot prove.
BATCH_PENDING_SQL = "lane = 'batch' AND state = 'pending'"
OPEN_SQL = "state IN ('pending', 'running')"


class ApiKey(SQLModel, table=True):
    """An API key: stored as a SHA-256 hash of a high-entropy secret, never in plain text."""

    __tablename__ = "api_key"

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    key_hash: str = Field(sa_column=sa.Column(sa.String(64), nullable=False, unique=True))
    #: The key's first characters, so an operator can tell keys apart without the secret.
    prefix: str = Field(sa_column=sa.Column(sa.String(16), nullable=False))
    workspaces: list[str] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    scopes: list[str] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    created_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
    #: When the key stops working; a rotation's grace period puts it in the future.
    revoked_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))
    #: When it expires (None: never); from then on it answers 401 like a revoked one.
    expires_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))
    #: When it last authenticated a call, to the minute (`api.auth.LAST_USED_EVERY`).
    last_used_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))


class Retrieval(SQLModel, table=True):
    """One request to retrieve a URL, keyed by the client's (workspace_id, mutation_id)."""

    __tablename__ = "retrieval"
    __table_args__ = (
        sa.UniqueConstraint("workspace_id", "mutation_id", name="uq_retrieval_mutation"),
        sa.Index("ix_retrieval_open", "state", "lease_until"),
        # The batch claim's loose scan of workspaces with pending work, and their oldest row.
        sa.Index(
            "ix_retrieval_batch_pending",
            "workspace_id",
            "created_at",
            postgresql_where=sa.text(BATCH_PENDING_SQL),
            sqlite_where=sa.text(BATCH_PENDING_SQL),
        ),
        # Per-workspace open counts (quota ceiling, interactive limit, metrics).
        sa.Index(
            "ix_retrieval_workspace_open",
            "workspace_id",
            "lane",
            postgresql_where=sa.text(OPEN_SQL),
            sqlite_where=sa.text(OPEN_SQL),
        ),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    mutation_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    url: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    kind: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    #: Requested language, lower-cased (tags compare case-insensitively); "" when none.
    language: str = Field(sa_column=sa.Column(sa.String(35), nullable=False, server_default=""))
    state: str = Field(sa_column=sa.Column(sa.String(16), nullable=False))
    #: Scheduling lane (`LANES`); the outbox and the sweep publish to this lane's queue.
    lane: str = Field(
        default=LANE_INTERACTIVE,
        sa_column=sa.Column(sa.String(16), nullable=False, server_default=LANE_INTERACTIVE),
    )
    #: Claims so far; the settle must match the attempt it claimed with (fencing token).
    attempt: int = Field(sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"))
    lease_until: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))
    #: When the outbox last handed it to the broker; NULL = recorded but never published.
    published_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))
    created_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
    valid_until: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
    settled_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))
    result: dict[str, Any] | None = Field(default=None, sa_column=sa.Column(sa.JSON))
    evidence_id: uuid.UUID | None = Field(default=None, sa_column=sa.Column(sa.Uuid))
    evidence_revision: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    #: The client's reuse window (`Cache-Control: max-age=N`), in seconds; None when not sent.
    max_age_seconds: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))


class Evidence(SQLModel, table=True):
    """A source as the service knows it: (workspace, kind, normalised final URL, language)."""

    __tablename__ = "evidence"
    __table_args__ = (
        sa.UniqueConstraint(
            "workspace_id", "kind", "url_key", "language", name="uq_evidence_identity"
        ),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    kind: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    url_key: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    language: str = Field(sa_column=sa.Column(sa.String(35), nullable=False, server_default=""))
    latest_revision: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    created_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))


class EvidenceRevision(SQLModel, table=True):
    """One immutable version of an evidence item's content."""

    __tablename__ = "evidence_revision"
    __table_args__ = (
        sa.UniqueConstraint("evidence_id", "content_sha256", name="uq_revision_content"),
    )

    evidence_id: uuid.UUID = Field(
        sa_column=sa.Column(sa.Uuid, sa.ForeignKey("evidence.id"), primary_key=True)
    )
    revision: int = Field(sa_column=sa.Column(sa.Integer, primary_key=True))
    content_sha256: str = Field(sa_column=sa.Column(sa.String(64), nullable=False))
    text: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    title: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    description: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    segments: list[dict[str, Any]] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    provenance: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    created_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
    #: When its content was last fetched or confirmed (a 304, an identical re-fetch); None: not
    #: since `created_at`.
    confirmed_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))


class EvidenceSource(SQLModel, table=True):
    """A requested URL and what it last led to: the revision, validators, result's status.

    Keyed by what a retrieval asks for (the evidence item's identity needs the final URL, known
    only after a fetch), so a retrieval can revalidate before it fetches
    (`worker.retrieval.freshness`).
    """

    __tablename__ = "evidence_source"

    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, primary_key=True))
    kind: str = Field(sa_column=sa.Column(sa.String(32), primary_key=True))
    #: The requested URL, normalised as evidence URLs are.
    url_key: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    #: Requested language, lower-cased; "" when none.
    language: str = Field(sa_column=sa.Column(sa.String(35), primary_key=True, server_default=""))
    evidence_id: uuid.UUID = Field(
        sa_column=sa.Column(sa.Uuid, sa.ForeignKey("evidence.id"), nullable=False)
    )
    revision: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    #: Every URL the pipeline fetched, in order: {"url", "final_url", "etag", "last_modified"}.
    validators: list[dict[str, Any]] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    #: The result's {"status", "reason", "warnings"} (content alone does not say them).
    outcome: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    #: When the row was last written (a full fetch, or a 304 with fresher validators).
    fetched_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))


class BatchSchedule(SQLModel, table=True):
    """When each workspace last had a batch retrieval claimed: the round-robin's memory."""

    __tablename__ = "batch_schedule"

    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, primary_key=True))
    served_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))


class OpenTally(SQLModel, table=True):
    """One shard of an upper bound of a workspace's open retrievals, kept so that a new one far
    below the open ceiling needs no count (`worker.lanes.open_tally`). Over a workspace's
    shards: the rows open at the last exact count (`counted`) plus every row recorded since
    (`added`); each shard holds at most its share of the `ceiling` they were split under.
    `counted` and `ceiling` change only under the workspace's quota lock; `added` also grows by
    a single retrieval's reservation (under the shard row's own lock)."""

    __tablename__ = "open_tally"

    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, primary_key=True))
    shard: int = Field(sa_column=sa.Column(sa.SmallInteger, primary_key=True))
    counted: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    added: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    ceiling: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))


class WorkspaceQuota(SQLModel, table=True):
    """An operator's per-workspace quota overrides; NULL means the setting's default."""

    __tablename__ = "workspace_quota"

    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, primary_key=True))
    open_retrievals: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    write_rate: float | None = Field(default=None, sa_column=sa.Column(sa.Float))
    write_burst: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    updated_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
    read_rate: float | None = Field(default=None, sa_column=sa.Column(sa.Float))
    read_burst: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))


class WebhookEndpoint(SQLModel, table=True):
    """A workspace's webhook receiver: where settled retrievals are announced, and how signed."""

    __tablename__ = "webhook_endpoint"
    __table_args__ = (sa.Index("ix_webhook_endpoint_workspace", "workspace_id"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    url: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    #: Subscribed event types, space-separated (` retrieval.settled `: padded for LIKE).
    events: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    description: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    enabled: bool = Field(sa_column=sa.Column(sa.Boolean, nullable=False))
    #: Why the service disabled it (NULL when enabled, or disabled by its owner).
    disabled_reason: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    #: The signing secret (`whsec_…`): the service must know it to sign, so it is stored as is
    #: (docs/webhooks.md); it is answered only at create and rotate.
    secret: str = Field(sa_column=sa.Column(sa.String(80), nullable=False))
    previous_secret: str | None = Field(default=None, sa_column=sa.Column(sa.String(80)))
    previous_secret_until: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))
    #: Since when every attempt failed (NULL after a success): disables it past a bound.
    failing_since: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))
    created_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
    updated_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))


class WebhookDelivery(SQLModel, table=True):
    """One event for one endpoint: the outbox row, its attempts and its outcome."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (
        sa.UniqueConstraint(
            "endpoint_id", "retrieval_id", "event_type", name="uq_webhook_delivery_event"
        ),
        sa.Index("ix_webhook_delivery_due", "state", "next_attempt_at"),
        sa.Index("ix_webhook_delivery_endpoint", "endpoint_id", "created_at"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    endpoint_id: uuid.UUID = Field(
        sa_column=sa.Column(
            sa.Uuid, sa.ForeignKey("webhook_endpoint.id", ondelete="CASCADE"), nullable=False
        )
    )
    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    retrieval_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    event_type: str = Field(sa_column=sa.Column(sa.String(64), nullable=False))
    #: `pending` (to send, or sending under a lease), `delivered` or `failed`.
    state: str = Field(sa_column=sa.Column(sa.String(16), nullable=False))
    #: Attempts claimed so far: the fencing token of the outcome's UPDATE.
    attempts: int = Field(sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"))
    lease_until: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))
    next_attempt_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
    #: Past this, a failed attempt marks the delivery failed (a redelivery moves it).
    retry_until: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
    published_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))
    created_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
    last_attempt_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))
    delivered_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))
    last_status: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    last_error: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    #: The event's `data` as JSON, for events that are not a retrieval as GET answers it (watch
    #: events, `worker.webhooks.events`); NULL for `retrieval.settled`.
    payload: str | None = Field(default=None, sa_column=sa.Column(sa.Text))


class Watch(SQLModel, table=True):
    """A source kept fresh on a schedule: each run is an ordinary batch-lane retrieval."""

    __tablename__ = "watch"
    __table_args__ = (
        sa.Index("ix_watch_workspace", "workspace_id", "created_at"),
        # What the scheduler reads every tick: the enabled watches, soonest first.
        sa.Index(
            "ix_watch_due",
            "next_run_at",
            postgresql_where=sa.text("enabled"),
            sqlite_where=sa.text("enabled"),
        ),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    workspace_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False))
    url: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    kind: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    #: "" when no language was asked for (as `Retrieval.language`).
    language: str = Field(sa_column=sa.Column(sa.String(35), nullable=False, server_default=""))
    interval_seconds: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    enabled: bool = Field(sa_column=sa.Column(sa.Boolean, nullable=False))
    #: The slot the next run belongs to (slots are spread over the interval per watch).
    next_run_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
    #: The slot of the last run started (NULL before the first).
    last_run_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DATETIME))
    #: Slots that passed without a run of their own (the scheduler was down): counted, not run.
    missed_runs: int = Field(sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"))
    #: The retrieval of the last run, and the evidence revision its watch last reported.
    last_retrieval_id: uuid.UUID | None = Field(default=None, sa_column=sa.Column(sa.Uuid))
    last_revision: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    #: The run whose outcome was announced (events are recorded once per run).
    reported_retrieval_id: uuid.UUID | None = Field(default=None, sa_column=sa.Column(sa.Uuid))
    #: Set once `watch.failing` was sent; cleared (with `watch.recovered`) on the next success.
    failing: bool = Field(
        sa_column=sa.Column(sa.Boolean, nullable=False, server_default=sa.false())
    )
    created_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
    updated_at: datetime = Field(sa_column=sa.Column(UTC_DATETIME, nullable=False))
