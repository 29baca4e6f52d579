"""The `evidence` command: migrate, run the processes, manage keys, enqueue batches."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Annotated

import typer

from worker.settings import get_settings

app = typer.Typer(help="Evidence retrieval service.", no_args_is_help=True, add_completion=False)
keys_app = typer.Typer(help="Manage API keys.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")


def _configure_logging() -> None:
    from worker import logs

    settings = get_settings()
    logs.configure(settings.log_level, settings.log_json)


@app.command()
def migrate() -> None:
    """Apply the Alembic migrations to EVIDENCE_DATABASE_URL."""
    from worker.store.migrate import upgrade

    upgrade()
    typer.echo("database is at the latest migration")


@app.command()
def api(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8000,
    workers: Annotated[int, typer.Option(help="Uvicorn worker processes.")] = 1,
) -> None:
    """Serve the HTTP API."""
    import uvicorn

    _configure_logging()
    os.environ["EVIDENCE_API_WORKERS"] = str(workers)  # read by each process (poll advice)
    uvicorn.run(
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
        str | None, typer.Option(help="Queues to consume, comma-separated (default: all).")
    ] = None,
    hostname: Annotated[str | None, typer.Option(help="Node name (unique per worker).")] = None,
    nice: Annotated[
        int, typer.Option(help="Lower the workers' CPU priority (keeps a shared API responsive).")
    ] = 0,
    pool: Annotated[
        str | None,
        typer.Option(help="threads (default, EVIDENCE_WORKER_POOL) or prefork."),
    ] = None,
) -> None:
    """Run a Celery worker that processes retrievals and sweeps.

    The threads pool keeps many retrievals in flight in one process and extracts in a pool of
    processes; this command supervises that process and replaces it if it dies.
    """
    from worker.jobs.node import lower_priority

    if nice:
        lower_priority(nice)
    _configure_logging()
    settings = get_settings()
    pool = pool or settings.worker_pool
    if pool not in ("threads", "prefork"):
        typer.echo("--pool must be threads or prefork", err=True)
        raise typer.Exit(2)
    if queues is None:
        from worker.jobs.celery_app import WORKER_QUEUES

        queues = ",".join(WORKER_QUEUES)
    argv = ["worker", "-Q", queues, "-E", "--loglevel", settings.log_level]
    if hostname:
        argv += ["--hostname", hostname]
    if pool == "prefork":
        from worker.jobs.celery_app import app as celery

        n = concurrency or settings.worker_concurrency or 2 * (os.cpu_count() or 1)
        celery.worker_main([*argv, "--pool", "prefork", "--concurrency", str(n)])
        return
    from worker.jobs.node import preload, run_threads_worker
    from worker.jobs.supervisor import Supervisor

    preload()

    in_flight = concurrency or settings.worker_in_flight
    argv += ["--concurrency", str(in_flight)]
    raise typer.Exit(Supervisor(lambda: run_threads_worker(argv)).run())


@app.command()
def beat(
    schedule: Annotated[
        str, typer.Option(help="Beat's schedule file.")
    ] = "var/celerybeat-schedule",
) -> None:
    """Run Celery beat, which schedules the sweep. Run exactly one per deployment."""
    from worker.jobs.celery_app import app as celery

    _configure_logging()
    os.makedirs(os.path.dirname(schedule) or ".", exist_ok=True)
    celery.start(["beat", "--schedule", schedule, "--loglevel", get_settings().log_level])


@app.command()
def flower(
    port: Annotated[int, typer.Option(help="Port to bind.")] = 5555,
    address: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
) -> None:
    """Run Flower with basic auth from EVIDENCE_FLOWER_BASIC_AUTH."""
    from worker.jobs.celery_app import app as celery

    auth = get_settings().flower_basic_auth
    if not auth or ":" not in auth:
        typer.echo("EVIDENCE_FLOWER_BASIC_AUTH must be set to user:password", err=True)
        raise typer.Exit(2)
    celery.start(["flower", f"--port={port}", f"--address={address}", f"--basic-auth={auth}"])


@app.command()
def mcp(
    transport: Annotated[str, typer.Option(help="stdio or http.")] = "stdio",
    host: Annotated[str, typer.Option(help="Interface to bind (http).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind (http).")] = 8001,
) -> None:
    """Serve the tools over MCP: stdio (key from EVIDENCE_API_KEY) or HTTP at /mcp (Bearer key)."""
    from api.mcp import server

    if transport not in ("stdio", "http"):
        typer.echo("--transport must be stdio or http", err=True)
        raise typer.Exit(2)
    _configure_logging()
    if transport == "stdio":
        server.run_stdio()
    else:
        server.run_http(host, port)


@keys_app.command("create")
def keys_create(
    workspace: Annotated[list[uuid.UUID], typer.Option(help="Workspace the key may use.")],
    scope: Annotated[list[str], typer.Option(help="Scope to grant.")] = ["agent:research"],  # noqa: B006
) -> None:
    """Create an API key; it is printed once, alone on the last line."""
    from api.auth import create_key
    from worker import clock
    from worker.store import db

    secret = db.with_transient_retry(
        lambda s: create_key(s, list(workspace), list(scope), clock.now())
    )
    typer.echo(f"created a key for {len(workspace)} workspace(s); it is shown only once:", err=True)
    typer.echo(secret)


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
    concurrency: Annotated[int, typer.Option(min=1, help="Requests in flight at once.")] = 8,
    wait: Annotated[
        bool, typer.Option("--wait", help="Poll until every retrieval is settled.")
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
) -> None:
    """Submit a batch of URLs; re-running the same file resumes without duplicates."""
    from api.batch.enqueue import EnqueueOptions, run_enqueue

    options = EnqueueOptions(
        file=file,
        workspace=workspace,
        kind=kind,
        language=language,
        api=api,
        key=key,
        concurrency=concurrency,
        wait=wait,
        out=out,
        batch=batch,
        poll_interval=poll_interval,
        timeout=timeout,
    )
    raise typer.Exit(run_enqueue(options))


if __name__ == "__main__":
    app()
