"""Configuration: one settings class read from `EVIDENCE_*` environment variables."""

import os
from functools import lru_cache
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

Network = IPv4Network | IPv6Network

#: Fetches of one host at once across every worker (Scrapy's default per domain is 8 too).
DEFAULT_FETCH_PER_HOST_LIMIT = 8
DEFAULT_USER_AGENT = (
    "EvidenceRetrieval/0.1 (+https://github.com/evidence-retrieval; research fetcher)"
)


def _split_commas(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    """Every knob of the service: the contract's names plus our extras (docs/configuration.md)."""

    model_config = SettingsConfigDict(env_prefix="EVIDENCE_", extra="ignore")

    database_url: str = "sqlite:///./var/evidence.db"
    broker_url: str = "redis://127.0.0.1:6379/0"
    #: Redis used for shared politeness state and robots.txt cache; defaults to the broker's.
    redis_url: str | None = None
    egress_allow_cidrs: Annotated[list[Network], NoDecode] = Field(default_factory=list)
    ca_bundle: Path | None = None
    receipt_ttl_seconds: int = Field(default=86_400, ge=1)
    fetch_allowed_ports: Annotated[list[int], NoDecode] = Field(default_factory=lambda: [443])
    flower_basic_auth: str | None = None

    # Lifecycle.
    max_attempts: int = Field(default=3, ge=1, le=20)
    sweep_interval_seconds: float = Field(default=5.0, gt=0)
    #: Beat's lock in Redis: its holder alone sends the schedule and renews it at every tick;
    #: a killed holder's lock expires this long after its last renewal, then another takes it.
    beat_lock_timeout_seconds: float = Field(default=30.0, ge=1)
    #: A pending row whose publish is older than this is published again by the sweep.
    republish_after_seconds: float = Field(default=60.0, gt=0)
    #: Extra time past the hard time limit before a running row counts as lost.
    lease_grace_seconds: float = Field(default=15.0, ge=0)

    # The archived HTTP exchange (docs/archive.md).
    #: Write each revision's HTTP exchange as WARC 1.1 records, indexed in the database.
    archive_enabled: bool = True
    #: Where this host's rolling WARC files go.
    archive_dir: Path = Path("var/archive")
    #: Raw records fetched longer ago than this are purged by the sweep (0: kept for ever);
    #: the extracted evidence stays.
    archive_retention_days: float = Field(default=0.0, ge=0)
    #: The largest WACZ export: the archived bytes (gzipped, as stored) of the records it
    #: copies; a larger selection is refused (413, `export_too_large`).
    export_max_bytes: int = Field(default=512 * 1024 * 1024, gt=0)

    # Fetch bounds.
    fetch_connect_timeout_seconds: float = Field(default=5.0, gt=0)
    fetch_read_timeout_seconds: float = Field(default=10.0, gt=0)
    fetch_total_timeout_seconds: float = Field(default=30.0, gt=0)
    fetch_max_bytes: int = Field(default=5 * 1024 * 1024, gt=0)
    extract_budget_seconds: float = Field(default=20.0, gt=0)
    #: Margin between the work's own bounds and Celery's soft limit (hard adds 1.5x more).
    time_limit_margin_seconds: float = Field(default=10.0, gt=0)
    user_agent: str = DEFAULT_USER_AGENT
    robots_txt: bool = True
    fetch_per_host_limit: int = Field(default=DEFAULT_FETCH_PER_HOST_LIMIT, ge=1, le=64)

    # Processes.
    #: Connections each process keeps open to PostgreSQL (plus as many again in bursts).
    db_pool_size: int = Field(default=10, ge=1, le=100)
    #: Let psycopg prepare a statement on the server once it ran five times on a connection.
    #: Off behind pgbouncer in transaction mode older than 1.21 (or with
    #: `max_prepared_statements = 0`): a statement prepared on one server connection is then
    #: looked for on another.
    db_prepared_statements: bool = True
    #: PostgreSQL ends a session left idle inside a transaction this long (0: the server's own
    #: setting): a host cut off mid-transaction otherwise keeps its locks until TCP gives up
    #: (hours), and the sweep and every other host wait behind them. Shorter than the lease.
    #: Sent as a connection option, which pgbouncer refuses: behind one set 0 here and the
    #: bound on the database (docs/configuration.md).
    db_idle_transaction_timeout_seconds: float = Field(default=30.0, ge=0)
    #: PostgreSQL drops a session of ours whose host stopped answering within about this long
    #: (TCP keepalives and a user timeout on the server's side of the connection; 0: the
    #: server's own settings, two hours of silence by default). The idle bound above does not
    #: cover a session cut off in the middle of a statement (a settle sending its text): such
    #: a session holds its rows while the server waits for the rest. A connection option too.
    db_peer_timeout_seconds: float = Field(default=30.0, ge=0)
    #: Prefork only: worker processes (default 2 x cores).
    worker_concurrency: int | None = None
    #: How `evidence worker` runs retrievals: `threads` (many in flight per process, extraction
    #: in a process pool: the default), or `prefork` (one retrieval per child process).
    worker_pool: Literal["threads", "prefork"] = "threads"
    #: Threads pool: retrievals one worker process keeps in flight (each mostly waits on the
    #: network; see docs/execution-model.md for what one costs).
    worker_in_flight: int = Field(default=384, ge=1, le=4096)
    #: Threads pool: the CPU the worker process keeps its threads on (`auto`: one of those it
    #: may use, when it may use two or more; `none`: all of them; or a CPU number). Its threads
    #: hand the interpreter lock over at every blocking call, far cheaper within one CPU
    #: (worker/platform/cpu_pin.py); its extraction processes keep every CPU.
    worker_cpu: Literal["auto", "none"] | Annotated[int, Field(ge=0)] = "auto"
    #: Threads pool: extraction processes per worker (default: one per core).
    extract_processes: int | None = Field(default=None, ge=1, le=256)
    #: Added to the extraction processes' nice value, so fetching, the API and the database
    #: win the CPU over extraction when they compete for it.
    extract_nice: int = Field(default=5, ge=0, le=19)
    #: API processes serving behind one socket (`evidence api --workers` sets it). Each process
    #: sees only its share of new retrievals; the poll advice scales what it saw by this.
    api_workers: int = Field(default=1, ge=1, le=256)
    #: `evidence api`: `auto` keeps each API process on a CPU of its own while there are CPUs to
    #: go round, when it may use two or more (`worker.platform.cpu_pin`); `none` leaves them
    #: unpinned.
    api_cpu: Literal["auto", "none"] = "auto"
    api_retry_after_seconds: int = 5
    log_level: str = "INFO"
    log_json: bool = True

    # What the API and the MCP HTTP server accept (docs/security.md, "Limits and availability").
    #: Largest request body, in bytes. The default fits the largest legitimate body, a brief
    #: revision at every length limit in non-ASCII text JSON-escaped (7 855 762 bytes).
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    #: Open connections plus running requests past which new requests are answered 503.
    http_limit_concurrency: int = Field(default=1000, ge=1)
    #: Seconds a connection may take to send a request's line and headers.
    http_header_timeout_seconds: float = Field(default=10.0, gt=0)
    #: Seconds a request may take to send its whole body once its headers are in.
    http_body_timeout_seconds: float = Field(default=60.0, gt=0)
    #: Seconds an idle keep-alive connection is kept open.
    http_keepalive_seconds: int = Field(default=5, ge=1)
    #: Largest request line plus headers, in bytes.
    http_max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    #: Image-byte fetches (`images/get` with include_bytes) at once, per API key and per process.
    image_fetch_per_key: int = Field(default=4, ge=1)
    #: Image-byte fetches at once per process, all keys together.
    image_fetch_concurrency: int = Field(default=16, ge=1)
    #: Total seconds one image-byte fetch may take (connect, redirects, body).
    image_fetch_timeout_seconds: float = Field(default=10.0, gt=0)
    # Evidence diffs (docs/evidence-diff.md, "Bounds on the work"), per API process.
    #: Diffs computed at once (threads of the diff pool).
    diff_concurrency: int = Field(default=2, ge=1, le=64)
    #: Diffs of one workspace admitted at once (running or queued); one more is 429.
    diff_per_workspace: int = Field(default=2, ge=1)
    #: Diffs admitted at once, all workspaces together; one more is 429.
    diff_queue: int = Field(default=32, ge=1)
    # Fair sharing (docs/fairness.md). Defaults per workspace; `evidence quotas set` overrides.
    #: Open (pending + running) retrievals a workspace may have; beyond it new ones are 429.
    quota_open_retrievals: int = Field(default=10_000, ge=0)
    #: Retrievals a workspace may submit per second on the write routes (a token bucket)...
    quota_write_rate: float = Field(default=100.0, gt=0)
    #: ...and at once (the bucket's size; a full 1 000-item batch needs 1 000).
    quota_write_burst: int = Field(default=2_000, ge=1)
    #: Polls and reads a workspace may make per second (GET a retrieval, batch-get, a replayed
    #: POST, the read side; a token bucket, docs/fairness.md "Read admission")...
    quota_read_rate: float = Field(default=100.0, gt=0)
    #: ...and at once (the bucket's size).
    quota_read_burst: int = Field(default=1_000, ge=1)
    #: A workspace's single retrievals beyond this many open ones go to the batch lane: a
    #: client looping over the single route is a batch, and must not crowd out other agents.
    interactive_open_limit: int = Field(default=20, ge=0)

    # Webhooks (docs/webhooks.md).
    #: First retry delay; each further one doubles, up to the cap, with jitter.
    webhook_retry_base_seconds: float = Field(default=10.0, gt=0)
    webhook_retry_cap_seconds: float = Field(default=3_600.0, gt=0)
    #: How long a delivery is retried before it is marked failed.
    webhook_retry_window_seconds: float = Field(default=86_400.0, gt=0)
    #: An endpoint whose deliveries have failed for this long is disabled (default: the window).
    webhook_disable_after_seconds: float | None = Field(default=None, gt=0)
    #: How long the previous signing secret keeps signing after a rotation.
    webhook_secret_grace_seconds: float = Field(default=86_400.0, ge=0)
    webhook_connect_timeout_seconds: float = Field(default=5.0, gt=0)
    webhook_read_timeout_seconds: float = Field(default=10.0, gt=0)
    webhook_total_timeout_seconds: float = Field(default=15.0, gt=0)
    #: Deliveries of one endpoint in flight at once, fleet-wide (a slow one holds no more).
    webhook_endpoint_concurrency: int = Field(default=2, ge=1, le=100)
    #: Endpoints a workspace may register.
    webhook_max_endpoints: int = Field(default=20, ge=1)
    #: Deliveries attempted or queued at once, fleet-wide (one workspace holds at most half):
    #: the most worker threads webhooks take from retrievals (docs/webhooks.md).
    webhook_max_in_flight: int = Field(default=32, ge=2)

    # Watches (docs/watches.md).
    #: Watches a workspace may keep.
    watch_limit_per_workspace: int = Field(default=100, ge=1)
    #: How often beat looks for due watches; a watch runs at most this late.
    watch_tick_seconds: float = Field(default=15.0, gt=0)
    #: Due watches one tick starts at most (the rest wait for the next tick).
    watch_tick_batch: int = Field(default=500, ge=1)

    # MCP server (`evidence mcp`).
    #: How long a retrieve tool call waits for its retrieval to settle before answering.
    mcp_wait_seconds: float = Field(default=20.0, ge=0, le=300)
    #: The API key a stdio MCP server acts with (EVIDENCE_API_KEY); over HTTP each request's
    #: Bearer header is used instead.
    api_key: SecretStr | None = None

    @field_validator("egress_allow_cidrs", mode="before")
    @classmethod
    def _parse_cidrs(cls, value: Any) -> Any:
        value = _split_commas(value)
        return [ip_network(v, strict=False) if isinstance(v, str) else v for v in value or []]

    @field_validator("fetch_allowed_ports", mode="before")
    @classmethod
    def _parse_ports(cls, value: Any) -> Any:
        return _split_commas(value)

    @field_validator("fetch_allowed_ports")
    @classmethod
    def _ports_in_range(cls, value: list[int]) -> list[int]:
        for port in value:
            if not 1 <= port <= 65535:
                raise ValueError(f"port out of range: {port}")
        return value

    @property
    def soft_time_limit(self) -> float:
        """Seconds before a task is asked to stop (fetch total + extract budget + margin)."""
        return (
            self.fetch_total_timeout_seconds
            + self.extract_budget_seconds
            + self.time_limit_margin_seconds
        )

    @property
    def hard_time_limit(self) -> float:
        """Seconds before a task's process is killed."""
        return self.soft_time_limit + 1.5 * self.time_limit_margin_seconds

    @property
    def lease_seconds(self) -> float:
        """How long a claim holds: no task can outlive its hard limit, so past this it is lost."""
        return self.hard_time_limit + self.lease_grace_seconds

    @property
    def webhook_disable_after(self) -> float:
        """Seconds of continuous failure after which an endpoint is disabled."""
        return self.webhook_disable_after_seconds or self.webhook_retry_window_seconds

    @property
    def webhook_lease_seconds(self) -> float:
        """How long a delivery claim holds: past the send's total bound, with the grace."""
        return self.webhook_total_timeout_seconds + 5 + self.lease_grace_seconds

    @property
    def extract_process_count(self) -> int:
        """Extraction processes of a threads-pool worker."""
        return self.extract_processes or os.cpu_count() or 1

    @property
    def beat_poll_seconds(self) -> float:
        """How often beat ticks: the holder renews its lock at least three times per timeout,
        a standby tries to take it as often; a killed holder is replaced within the timeout
        plus this."""
        return min(self.sweep_interval_seconds, self.beat_lock_timeout_seconds / 3)

    @property
    def politeness_redis_url(self) -> str:
        return self.redis_url or self.broker_url


def flower_logins(value: str | None) -> list[tuple[str, str]]:
    """The (user, password) pairs of EVIDENCE_FLOWER_BASIC_AUTH, or ValueError saying what is wrong.

    Flower takes `user:password`, several separated by commas, and lets in whoever sends one of
    them: an entry with an empty password (`admin:`, `:`) would let anyone in who knows the user
    name. The message never repeats the value, which holds the passwords.
    """
    if not value:
        raise ValueError("it is not set; set it to user:password")
    logins = []
    for number, entry in enumerate(value.split(","), start=1):
        user, colon, password = entry.partition(":")
        where = f"login {number}" if "," in value else "the login"
        if not colon:
            raise ValueError(f"{where} has no ':'; write user:password")
        if not user.strip():
            raise ValueError(f"{where} has an empty user name")
        if not password.strip():
            raise ValueError(f"{where} has an empty password")
        logins.append((user, password))
    return logins


@lru_cache
def get_settings() -> Settings:
    """Return the process-wide settings (cached; tests clear the cache after changing env)."""
    return Settings()
