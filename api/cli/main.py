"""The `evidence` command: migrate, run the processes, manage keys, enqueue batches."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import structlog
import typer

from api.cli import webhooks as webhook_cli
from worker.platform.settings import flower_logins, get_settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from api.auth import NewKey

T = TypeVar("T")

#: Click's plain help layout: typer's Rich panels print a type after every option, a flag's
#: too (`--wait <bool>`), though a flag takes no value (`--wait true` is an error). Sub-apps
#: inherit the layout.
app = typer.Typer(
    help="Evidence retrieval service.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
keys_app = typer.Typer(help="Manage API keys.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
quotas_app = typer.Typer(
    help="Per-workspace quotas (defaults: EVIDENCE_QUOTA_*).", no_args_is_help=True
)
app.add_typer(quotas_app, name="quotas")
app.add_typer(webhook_cli.app, name="webhooks")


def _configure_logging() -> None:
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.platform import logs

    settings = get_settings()
    logs.configure(settings.log_level, settings.log_json)


def _interruptible() -> None:
    """Let Ctrl-C stop this command even if it was started with SIGINT ignored (a script's
    `cmd &` or `trap '' INT`): Python then never installs its handler, so the signal would be
    dropped. Stopping is always safe here: re-running the same command resumes."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


@contextmanager
def _database_errors() -> Iterator[None]:
    """A database that cannot be used is one line on stderr and exit 1, not a long traceback
    (the driver's first line names the host and the cause, never the password)."""
    from sqlalchemy.exc import OperationalError

    try:
        yield
    except OperationalError as exc:
        cause = str(exc.orig or exc).strip().splitlines()[0]
        typer.echo(f"error: cannot use the database (EVIDENCE_DATABASE_URL): {cause}", err=True)
        raise typer.Exit(1) from None


@app.command()
def migrate() -> None:
    """Apply the Alembic migrations to EVIDENCE_DATABASE_URL."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.store.migrate import upgrade

    with _database_errors():
        upgrade()
    typer.echo("database is at the latest migration")


def _shared_dir(prefix: str) -> str:
    """A directory the command's processes share, removed when the command ends."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def api_processes() -> int:
    """The API's process count when `--workers` is not given: one per CPU this process may
    use. One process alone queued POSTs behind each other while a worker drained a backlog
    (docs/execution-model.md, "API latency"); each process claims a CPU of its own."""
    return len(os.sched_getaffinity(0))


@app.command()
def api(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8000,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Uvicorn worker processes (default: one per CPU this process may use).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the HTTP API."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.serving import cpu_claims
    from api.serving import server as serving

    workers = workers or api_processes()
    _configure_logging()
    os.environ["EVIDENCE_API_WORKERS"] = str(workers)  # read by each process (poll advice)
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Each process counts only the requests it answers: without a directory they all
        # write to, /metrics would show whichever process answered the scrape.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = _shared_dir("evidence-api-metrics-")
    os.environ.pop(cpu_claims.CLAIMS_ENV, None)
    if cpu_claims.wanted():  # each process claims a CPU here as it starts (`served_app`)
        os.environ[cpu_claims.CLAIMS_ENV] = _shared_dir("evidence-api-cpus-")
    serving.run(
        "api.http.app:served_app",
        factory=True,  # called in every worker process: configures its logging, then serves
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
        access_log=False,  # our middleware logs each request (uvicorn's line never showed)
    )


@app.command()
def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(
            help="Threads pool: retrievals in flight (default EVIDENCE_WORKER_IN_FLIGHT). "
            "Prefork: processes (default EVIDENCE_WORKER_CONCURRENCY, else 2 x cores)."
        ),
    ] = None,
    queues: Annotated[
        str | None,
        typer.Option(
            help="Queues to consume (default: retrievals,retrievals-batch,webhooks,sweep): "
            "retrievals is the interactive lane, retrievals-batch the batch lane, webhooks the "
            "signed deliveries. Whatever the order given, a worker takes sweep, then "
            "interactive, then webhook, then batch messages.",
            show_default=False,
        ),
    ] = None,
    hostname: Annotated[str | None, typer.Option(help="Node name (unique per worker).")] = None,
    nice: Annotated[
        int, typer.Option(help="Lower the workers' CPU priority (keeps a shared API responsive).")
    ] = 0,
    pool: Annotated[
        str | None,
        typer.Option(help="threads (default, EVIDENCE_WORKER_POOL) or prefork."),
    ] = None,
    idle: Annotated[
        bool,
        typer.Option(
            "--idle",
            help="Run the workers and their extraction processes at Linux's idle CPU priority "
            "(SCHED_IDLE): any other process that wakes takes the CPU from them at once "
            "(keeps a shared API's latency; with --nice, their share under full load).",
        ),
    ] = False,
) -> None:
    """Run a Celery worker that processes retrievals (both lanes) and sweeps.

    The threads pool keeps many retrievals in flight in one process and extracts in a pool of
    processes; this command supervises that process and replaces it if it dies.
    """
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.jobs.celery_app import WORKER_QUEUES
    from worker.jobs.node import idle_priority, lower_priority

    queues = queues or WORKER_QUEUES
    if nice:
        lower_priority(nice)
    idle_applied = idle and idle_priority()
    _configure_logging()
    if idle and not idle_applied:
        structlog.get_logger("evidence.worker").warning("idle_priority_refused")
    settings = get_settings()
    pool = pool or settings.worker_pool
    if pool not in ("threads", "prefork"):
        typer.echo("--pool must be threads or prefork", err=True)
        raise typer.Exit(2)
    if pool == "prefork":
        n = concurrency or settings.worker_concurrency or 2 * (os.cpu_count() or 1)
    else:
        n = concurrency or settings.worker_in_flight
    argv = ["worker", "-Q", queues, "-E", "--loglevel", settings.log_level, "--concurrency", str(n)]
    if hostname:
        argv += ["--hostname", hostname]
    if settings.log_json:
        # Celery prints its banner as plain text; the facts an operator needs are logged here.
        argv.insert(0, "--quiet")
        structlog.get_logger("evidence.worker").info(
            "worker_starting", queues=queues, pool=pool, concurrency=n, hostname=hostname
        )
    if pool == "prefork":
        from worker.jobs.celery_app import app as celery  # Celery only for this command

        celery.worker_main([*argv, "--pool", "prefork"])
        return
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.jobs.node import preload, run_threads_worker
    from worker.jobs.supervisor import Supervisor

    preload()
    raise typer.Exit(Supervisor(lambda: run_threads_worker(argv)).run())


@app.command()
def beat(
    schedule: Annotated[
        str, typer.Option(help="Beat's schedule file.")
    ] = "var/celerybeat-schedule",
) -> None:
    """Run Celery beat, which schedules the sweep. Run exactly one per deployment."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.jobs.celery_app import app as celery

    _configure_logging()
    settings = get_settings()
    os.makedirs(os.path.dirname(schedule) or ".", exist_ok=True)
    argv = ["beat", "--schedule", schedule, "--loglevel", settings.log_level]
    if settings.log_json:
        argv.insert(0, "--quiet")  # the banner is plain text; beat logs "Starting..." itself
    celery.start(argv)


@app.command()
def flower(
    port: Annotated[int, typer.Option(help="Port to bind.")] = 5555,
    address: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
) -> None:
    """Run Flower with basic auth from EVIDENCE_FLOWER_BASIC_AUTH."""
    auth = get_settings().flower_basic_auth
    try:
        flower_logins(auth)
    except ValueError as exc:
        message = f"EVIDENCE_FLOWER_BASIC_AUTH is not usable: {exc}. Flower was not started."
        typer.echo(message, err=True)
        raise typer.Exit(2) from None
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.jobs.celery_app import app as celery
    from worker.jobs.flower_tasks import TASKS_COLUMNS

    _configure_logging()
    # --logging=none: tornado would otherwise add its own plain-text handler and set the level.
    celery.start(
        [
            "flower",
            f"--port={port}",
            f"--address={address}",
            f"--basic-auth={auth}",
            f"--tasks_columns={TASKS_COLUMNS}",
            "--logging=none",
        ]
    )


@app.command()
def mcp(
    transport: Annotated[str, typer.Option(help="stdio or http.")] = "stdio",
    host: Annotated[str, typer.Option(help="Interface to bind (http).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind (http).")] = 8001,
) -> None:
    """Serve the tools over MCP: stdio (key from EVIDENCE_API_KEY) or HTTP at /mcp (Bearer key)."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.mcp import server

    if transport not in ("stdio", "http"):
        typer.echo("--transport must be stdio or http", err=True)
        raise typer.Exit(2)
    _configure_logging()
    if transport == "stdio":
        server.run_stdio()
    else:
        server.run_http(host, port)


KeyId = Annotated[
    uuid.UUID, typer.Argument(metavar="KEY_ID", help="The key's id (`evidence keys list`).")
]


def _flag_value(parse: Callable[[], T], flag: str) -> T:
    """A flag's parsed value; a ValueError is click's usage error (exit 2) naming the flag."""
    try:
        return parse()
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=f"'{flag}'") from None


def _expiry(expires_in: str | None, expires_at: str | None, now: datetime) -> datetime | None:
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.cli.key_admin import parse_duration, parse_instant

    if expires_in is not None and expires_at is not None:
        raise typer.BadParameter("give --expires-in or --expires-at, not both")
    if expires_in is not None:
        return now + _flag_value(lambda: parse_duration(expires_in), "--expires-in")
    if expires_at is not None:
        return _flag_value(lambda: parse_instant(expires_at, now), "--expires-at")
    return None


def _print_new_key(what: str, key: NewKey) -> None:
    """Say on stderr what was made; the secret alone on stdout's last line (scripts take it)."""
    typer.echo(f"{what}: key {key.id} ({key.prefix}…); it is shown only once:", err=True)
    typer.echo(key.secret)


@keys_app.command("create")
def keys_create(
    workspace: Annotated[
        list[uuid.UUID],
        typer.Option(metavar="UUID", help="Workspace the key may use (repeat for more)."),
    ],
    scope: Annotated[
        list[str], typer.Option(metavar="SCOPE", help="Scope to grant (repeat for more).")
    ] = ["agent:research"],  # noqa: B006
    expires_in: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="Expire this long from now: 90d, 12h, 1h30m, 2w (then it answers 401).",
        ),
    ] = None,
    expires_at: Annotated[
        str | None,
        typer.Option(
            metavar="TIME", help="Expire at this ISO 8601 time (UTC unless it names an offset)."
        ),
    ] = None,
) -> None:
    """Create an API key; it is printed once, alone on the last line."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.auth import issue_key
    from worker.domain import clock
    from worker.store import db

    now = clock.now()
    until = _expiry(expires_in, expires_at, now)
    with _database_errors():
        key = db.with_transient_retry(
            lambda s: issue_key(s, list(workspace), list(scope), now, until)
        )
    expiry = f", expires {until:%Y-%m-%d %H:%M:%S}Z" if until is not None else ""
    _print_new_key(f"created for {len(workspace)} workspace(s){expiry}", key)


@keys_app.command("list")
def keys_list(
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document per key and line.")
    ] = False,
) -> None:
    """Every key by id and prefix (never the key itself), its grants, times and state."""
    import json

    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.cli.key_admin import document, table
    from worker.domain import clock
    from worker.store import db, keys

    now = clock.now()
    with _database_errors(), db.session_scope(readonly=True) as session:
        documents = [document(k, now) for k in keys.list_keys(session)]
    lines = [json.dumps(d) for d in documents] if as_json else table(documents)
    for line in lines:
        typer.echo(line)


def _missing_key(key_id: uuid.UUID) -> typer.Exit:
    typer.echo(f"error: no key has the id {key_id}", err=True)
    return typer.Exit(1)


@keys_app.command("revoke")
def keys_revoke(key_id: KeyId) -> None:
    """Revoke a key now: every API and MCP process refuses it (401) within 5 s."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.domain import clock
    from worker.store import db, keys

    def revoke(session: Session) -> tuple[str, datetime] | None:
        keys.revoke_key(session, key_id, clock.now())
        key = keys.get_key(session, key_id)
        return None if key is None or key.revoked_at is None else (key.prefix, key.revoked_at)

    with _database_errors():
        revoked = db.with_transient_retry(revoke)
    if revoked is None:
        raise _missing_key(key_id)
    prefix, at = revoked
    typer.echo(f"revoked key {key_id} ({prefix}…) at {at:%Y-%m-%d %H:%M:%S}Z", err=True)


@keys_app.command("rotate")
def keys_rotate(
    key_id: KeyId,
    grace: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="Keep the old key working this long (e.g. 10m, 1h) while clients switch; "
            "default: revoked at once.",
        ),
    ] = None,
) -> None:
    """A new key with the old one's workspaces, scopes and expiry, printed once alone on the
    last line; the old key is revoked (after --grace)."""
    from datetime import timedelta

    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.auth import rotate_key
    from api.cli.key_admin import parse_duration
    from worker.domain import clock
    from worker.store import db

    wait = _flag_value(lambda: parse_duration(grace), "--grace") if grace else timedelta(0)
    now = clock.now()
    with _database_errors():
        key = db.with_transient_retry(lambda s: rotate_key(s, key_id, now, wait))
    if key is None:
        raise _missing_key(key_id)
    old = f"at {now + wait:%Y-%m-%d %H:%M:%S}Z" if wait else "now"
    _print_new_key(f"replaces {key_id} (revoked {old})", key)


@quotas_app.command("set")
def quotas_set(
    workspace: Annotated[uuid.UUID, typer.Option(help="The workspace.")],
    open_: Annotated[
        int | None,
        typer.Option("--open", min=0, help="Open (pending + running) retrievals allowed."),
    ] = None,
    rate: Annotated[
        float | None, typer.Option(min=0.001, help="Retrievals per second on the write routes.")
    ] = None,
    burst: Annotated[
        int | None, typer.Option(min=1, help="Retrievals at once (the token bucket's size).")
    ] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Drop the workspace's overrides (back to defaults).")
    ] = False,
) -> None:
    """Override a workspace's quotas (the API applies them within 5 s)."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.domain import clock
    from worker.lanes import quota_overrides as quota_store
    from worker.store import db

    if clear:
        if open_ is not None or rate is not None or burst is not None:
            typer.echo("--clear takes no --open, --rate or --burst", err=True)
            raise typer.Exit(2)
        db.with_transient_retry(lambda s: quota_store.clear_override(s, workspace))
    elif open_ is None and rate is None and burst is None:
        typer.echo("nothing to set: give --open, --rate, --burst or --clear", err=True)
        raise typer.Exit(2)
    else:
        override = quota_store.Override(workspace, open_, rate, burst)
        db.with_transient_retry(lambda s: quota_store.set_override(s, override, clock.now()))
    _print_quotas([workspace])


@quotas_app.command("show")
def quotas_show(
    workspace: Annotated[
        list[uuid.UUID] | None,
        typer.Option(help="Only these workspaces (default: all overridden)."),
    ] = None,
) -> None:
    """Show the defaults and the quotas of overridden (or the given) workspaces."""
    _print_quotas(workspace or [])


def _print_quotas(workspaces: list[uuid.UUID]) -> None:
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.lanes import quota_overrides as quota_store
    from worker.retrieval import records as retrievals
    from worker.store import db

    settings = get_settings()
    defaults = (
        settings.quota_open_retrievals,
        settings.quota_write_rate,
        settings.quota_write_burst,
    )
    with db.session_scope(readonly=True) as session:
        found = {o.workspace_id: o for o in quota_store.list_overrides(session)}
        names = workspaces or sorted(found)
        rows = []
        for name in names:
            o = found.get(name) or quota_store.Override(name, None, None, None)
            values = (o.open_retrievals, o.write_rate, o.write_burst)
            shown = [
                f"{v:g}" if v is not None else f"{d:g} (default)"
                for v, d in zip(values, defaults, strict=True)
            ]
            open_now = retrievals.count_open(session, name, 10**9).total
            rows.append((str(name), *shown, str(open_now)))
    typer.echo(
        f"defaults: open {defaults[0]}, rate {defaults[1]:g}/s, burst {defaults[2]} "
        "(EVIDENCE_QUOTA_OPEN_RETRIEVALS, _WRITE_RATE, _WRITE_BURST)"
    )
    header = ("workspace", "open limit", "rate /s", "burst", "open now")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        typer.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


@app.command()
def enqueue(
    file: Annotated[
        str,
        typer.Argument(help="URL list: .csv, .jsonl/.ndjson, else one URL per line; - for stdin."),
    ],
    workspace: Annotated[uuid.UUID, typer.Option(help="Workspace the retrievals belong to.")],
    kind: Annotated[str, typer.Option(help="Default kind: url_text or published_captions.")],
    language: Annotated[
        str | None, typer.Option(help="Default language tag (e.g. en, pt-BR).")
    ] = None,
    api: Annotated[
        str, typer.Option(envvar="EVIDENCE_API_URL", help="Base URL of the evidence API.")
    ] = "http://127.0.0.1:8000",
    key: Annotated[
        str, typer.Option(envvar="EVIDENCE_API_KEY", show_default=False, help="API key (Bearer).")
    ] = "",
    concurrency: Annotated[int, typer.Option(min=1, help="Requests in flight at once.")] = 4,
    chunk_size: Annotated[
        int,
        typer.Option(min=1, max=1000, help="Lines per batch request (the API takes up to 1 000)."),
    ] = 1000,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait (long-poll) until every retrieval is settled.")
    ] = False,
    out: Annotated[
        Path | None, typer.Option(help="Write one JSON line per input line (results with --wait).")
    ] = None,
    batch: Annotated[
        str | None,
        typer.Option(help="Label mixed into mutation ids; a new label fetches the URLs again."),
    ] = None,
    poll_interval: Annotated[
        float, typer.Option(help="First poll interval in seconds with --wait; grows gently.")
    ] = 1.0,
    timeout: Annotated[
        float | None,
        typer.Option(help="With --wait, stop waiting after this many seconds; count unsettled."),
    ] = None,
    max_age: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Reuse window in seconds (Cache-Control: max-age): a source fetched or "
            "confirmed this recently completes from its stored revision, without a fetch.",
        ),
    ] = None,
) -> None:
    """Submit a batch of URLs; re-running the same file resumes without duplicates."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.enqueue.client import EnqueueOptions, run_enqueue

    _interruptible()

    options = EnqueueOptions(
        file=file,
        workspace=workspace,
        kind=kind,
        language=language,
        api=api,
        key=key,
        concurrency=concurrency,
        chunk_size=chunk_size,
        wait=wait,
        out=out,
        batch=batch,
        poll_interval=poll_interval,
        timeout=timeout,
        max_age=max_age,
    )
    raise typer.Exit(run_enqueue(options))


if __name__ == "__main__":
    app()
