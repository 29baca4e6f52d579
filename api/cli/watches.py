"""`evidence watches …`: operators manage any workspace's watches (docs/watches.md).

The same functions as the routes (`api.services.watches`) with the operator's principal, which
may use every workspace. Each command prints JSON (one document per line for `list`, or a table
with `--table`); a refusal is one line on stderr and exit 1.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import typer

from api.cli.webhooks import OPERATOR, _print, _run

app = typer.Typer(help="Watches: URLs retrieved again on a schedule.", no_args_is_help=True)

WatchId = Annotated[uuid.UUID, typer.Argument(help="The watch's id.")]
Interval = Annotated[int | None, typer.Option(help="Seconds between runs (at least 300).")]
Enabled = Annotated[bool | None, typer.Option("--enabled/--disabled", help="Run it or not.")]


@app.command("create")
def create(
    workspace: Annotated[uuid.UUID, typer.Option(help="The workspace it belongs to.")],
    url: Annotated[str, typer.Option(help="The https URL to retrieve at each run.")],
    interval: Annotated[int, typer.Option(help="Seconds between runs (at least 300).")],
    kind: Annotated[str, typer.Option(help="url_text or published_captions.")] = "url_text",
    language: Annotated[str | None, typer.Option(help="Language to ask for.")] = None,
    enabled: Annotated[bool, typer.Option("--enabled/--disabled", help="Run it or not.")] = True,
) -> None:
    """Watch a URL; prints the watch with its first slot (`next_run_at`)."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import watches
    from api.watch_schemas import WatchCreateRequest

    body: dict[str, Any] = {
        "workspace_id": str(workspace),
        "url": url,
        "kind": kind,
        "interval_seconds": interval,
        "enabled": enabled,
    }
    if language is not None:
        body["language"] = language
    _print(_run(lambda: watches.create_watch(OPERATOR, WatchCreateRequest.model_validate(body))))


@app.command("list")
def list_(
    workspace: Annotated[
        uuid.UUID | None, typer.Option(help="Only this workspace's (default: all).")
    ] = None,
    table: Annotated[bool, typer.Option(help="A table for people instead of JSON lines.")] = False,
) -> None:
    """One watch per line, oldest first."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import watches
    from worker.store.db import read_only_session
    from worker.watches import store

    with read_only_session() as session:
        rows = store.list_watches(
            session, None if workspace is None else [workspace], watches.MAX_LIST
        )
    docs = [watches.watch_doc(row) for row in rows]
    if not table:
        for doc in docs:
            _print(doc)
        return
    # Imported when the command runs: only the table needs it.
    from rich.console import Console
    from rich.table import Table

    view = Table()
    # Ids and URLs are copied from here: fold them over lines rather than cut them.
    for name in ("id", "url", "every", "enabled", "next run", "last run", "missed", "failing"):
        view.add_column(name, overflow="fold")
    for doc in docs:
        view.add_row(
            doc["id"],
            doc["url"],
            f"{doc['interval_seconds']} s",
            "yes" if doc["enabled"] else "no",
            doc["next_run_at"],
            doc["last_run_at"] or "-",
            str(doc["missed_runs"]),
            "yes" if doc["failing"] else "no",
        )
    Console().print(view)


@app.command("show")
def show(watch_id: WatchId) -> None:
    """One watch, with its schedule."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import watches

    _print(_run(lambda: watches.get_watch(OPERATOR, watch_id)))


@app.command("update")
def update(
    watch_id: WatchId,
    url: Annotated[str | None, typer.Option(help="A new URL.")] = None,
    kind: Annotated[str | None, typer.Option(help="url_text or published_captions.")] = None,
    language: Annotated[str | None, typer.Option(help="A language ('' clears it).")] = None,
    interval: Interval = None,
    enabled: Enabled = None,
) -> None:
    """Change what it watches or how often, or enable / disable it."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import watches
    from api.watch_schemas import WatchUpdateRequest

    given = {"url": url, "kind": kind, "interval_seconds": interval, "enabled": enabled}
    body: dict[str, Any] = {name: value for name, value in given.items() if value is not None}
    if language is not None:
        body["language"] = language or None
    _print(
        _run(
            lambda: watches.update_watch(
                OPERATOR, watch_id, WatchUpdateRequest.model_validate(body)
            )
        )
    )


@app.command("delete")
def delete(watch_id: WatchId) -> None:
    """Stop watching."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import watches

    _run(lambda: watches.delete_watch(OPERATOR, watch_id))
    typer.echo(f"deleted {watch_id}", err=True)
