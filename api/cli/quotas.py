"""`evidence quotas`: per-workspace overrides of the open ceiling, the write and the read rate."""

from __future__ import annotations

import uuid
from typing import Annotated

import typer

from worker.platform.settings import get_settings

app = typer.Typer(help="Per-workspace quotas (defaults: EVIDENCE_QUOTA_*).", no_args_is_help=True)


@app.command("set")
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
    read_rate: Annotated[
        float | None,
        typer.Option(min=0.001, help="Polls and reads per second (GET, batch-get, replays)."),
    ] = None,
    read_burst: Annotated[
        int | None, typer.Option(min=1, help="Polls and reads at once (the read bucket's size).")
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

    given = [v for v in (open_, rate, burst, read_rate, read_burst) if v is not None]
    if clear:
        if given:
            typer.echo(
                "--clear takes no --open, --rate, --burst, --read-rate or --read-burst", err=True
            )
            raise typer.Exit(2)
        db.with_transient_retry(lambda s: quota_store.clear_override(s, workspace))
    elif not given:
        typer.echo(
            "nothing to set: give --open, --rate, --burst, --read-rate, --read-burst or --clear",
            err=True,
        )
        raise typer.Exit(2)
    else:
        override = quota_store.Override(
            workspace, open_, rate, burst, read_rate=read_rate, read_burst=read_burst
        )
        db.with_transient_retry(lambda s: quota_store.set_override(s, override, clock.now()))
    _print_quotas([workspace])


@app.command("show")
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
        settings.quota_read_rate,
        settings.quota_read_burst,
    )
    with db.session_scope(readonly=True) as session:
        found = {o.workspace_id: o for o in quota_store.list_overrides(session)}
        names = workspaces or sorted(found)
        rows = []
        for name in names:
            o = found.get(name) or quota_store.Override(name, None, None, None)
            values = (o.open_retrievals, o.write_rate, o.write_burst, o.read_rate, o.read_burst)
            shown = [
                f"{v:g}" if v is not None else f"{d:g} (default)"
                for v, d in zip(values, defaults, strict=True)
            ]
            open_now = retrievals.count_open(session, name, 10**9).total
            rows.append((str(name), *shown, str(open_now)))
    typer.echo(
        f"defaults: open {defaults[0]}, rate {defaults[1]:g}/s, burst {defaults[2]}, "
        f"read rate {defaults[3]:g}/s, read burst {defaults[4]} (EVIDENCE_QUOTA_OPEN_RETRIEVALS, "
        "_WRITE_RATE, _WRITE_BURST, _READ_RATE, _READ_BURST)"
    )
    header = ("workspace", "open limit", "rate /s", "burst", "read /s", "read burst", "open now")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        typer.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
