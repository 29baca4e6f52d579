"""The `evidence` command: migrate, run the processes, enqueue batches; `keys`, `quotas`,
`webhooks` and `watches` are sub-commands of their own modules, and so is `export`."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import structlog
import typer

from api.cli import export as export_cli
from api.cli import keys, quotas
from api.cli import watches as watch_cli
from api.cli import webhooks as webhook_cli
from api.cli.common import database_errors
from worker.platform.settings import flower_logins, get_settings

if TYPE_CHECKING:
    pass

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
app.add_typer(keys.app, name="keys")
app.add_typer(quotas.app, name="quotas")
app.add_typer(webhook_cli.app, name="webhooks")
app.add_typer(watch_cli.app, name="watches")
app.command("export")(export_cli.export)


def _configure_logging() -> None:
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.platform import logs

    settings = get_settings()
    logs.configure(settings.log_level, settings.log_json)


def _cpu_share_option(envvar: str, modes: str) -> Any:
    """`--cpu-share` of `evidence api` and `evidence worker` (worker/platform/cpu_share.py)."""
    return typer.Option(
        envvar=envvar,
        help=f"The floor under a saturated CPU: {modes}.",
    )


def _cpu_weight_option(side: str, envvar: str) -> Any:
    return typer.Option(
        min=1, max=10_000, envvar=envvar, help=f"The {side}'s cgroup CPU weight (100 = default)."
    )


def _share_cpu(role: str, mode: str, weight: int, nice: int) -> None:
    """Apply the CPU share mode before any process or thread starts (all inherit it); log it."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.platform import cpu_share

    modes = cpu_share.MODES if role == "worker" else ("weight", "none")
    if mode not in modes:
        typer.echo(f"--cpu-share must be one of {', '.join(modes)}", err=True)
        raise typer.Exit(2)
    applied = cpu_share.apply(role, mode, weight=weight, nice=nice)
    _configure_logging()
    log = structlog.get_logger(f"evidence.{role}")
    if applied.refused:
        log.warning("cpu_share_fallback", asked=mode, reason=applied.refused, **vars(applied))
    else:
        log.info("cpu_share", **vars(applied))


def _interruptible() -> None:
    """Let Ctrl-C stop this command even if it was started with SIGINT ignored (a script's
    `cmd &` or `trap '' INT`): Python then never installs its handler, so the signal would be
    dropped. Stopping is always safe here: re-running the same command resumes."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


@app.command()
def migrate() -> None:
    """Apply the Alembic migrations to EVIDENCE_DATABASE_URL."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.store.migrate import upgrade

    with database_errors():
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
    cpu_share: Annotated[
        str,
        _cpu_share_option(
            "EVIDENCE_API_CPU_SHARE",
            "weight (a cgroup with --cpu-weight, where one can be made) or none",
        ),
    ] = "weight",
    cpu_weight: Annotated[int, _cpu_weight_option("API", "EVIDENCE_API_CPU_WEIGHT")] = 200,
) -> None:
    """Serve the HTTP API."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.serving import cpu_claims
    from api.serving import server as serving

    workers = workers or api_processes()
    _share_cpu("api", cpu_share, cpu_weight, 0)
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
    pool: Annotated[
        str | None,
        typer.Option(help="threads (default, EVIDENCE_WORKER_POOL) or prefork."),
    ] = None,
    cpu_share: Annotated[
        str,
        _cpu_share_option(
            "EVIDENCE_WORKER_CPU_SHARE",
            "weight (a cgroup with --cpu-weight; --nice where none can be made), nice, idle "
            "(SCHED_IDLE: starves under load) or none",
        ),
    ] = "weight",
    cpu_weight: Annotated[int, _cpu_weight_option("worker", "EVIDENCE_WORKER_CPU_WEIGHT")] = 20,
    nice: Annotated[
        int,
        typer.Option(
            envvar="EVIDENCE_WORKER_NICE",
            help="Added to the worker's nice value (and its session's) with --cpu-share nice or "
            "idle, or when weight falls back.",
        ),
    ] = 10,
) -> None:
    """Run a Celery worker that processes retrievals (both lanes) and sweeps.

    The threads pool keeps many retrievals in flight in one process and extracts in a pool of
    processes; this command supervises that process and replaces it if it dies.
    """
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.jobs.celery_app import WORKER_QUEUES

    queues = queues or WORKER_QUEUES
    _share_cpu("worker", cpu_share, cpu_weight, nice)
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
        str | None,
        typer.Option(
            hidden=True,
            help="Ignored: the schedule lives in Redis. Accepted so older command lines run.",
        ),
    ] = None,
) -> None:
    """Run Celery beat, which schedules the sweep. Run it on as many hosts as you like: the one
    holding the lock in Redis sends, the others stand by (EVIDENCE_BEAT_LOCK_TIMEOUT_SECONDS)."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.jobs.celery_app import app as celery

    del schedule  # the file scheduler is gone (worker/jobs/beat_lock.py)
    _configure_logging()
    settings = get_settings()
    argv = ["beat", "--loglevel", settings.log_level]
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
