"""`evidence export`: a WACZ package of a workspace's archived exchanges (docs/archive.md).

The operator's command: any workspace, no read rate. The package is written next to `--out`
and renamed onto it once whole, so a failure never leaves a package cut short under that name.
Prints one JSON line (what the package holds); a refusal is one line on stderr and exit 1.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from api.cli.webhooks import OPERATOR, _print

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")


def _run(call: Callable[[], T]) -> T:
    """Run a service call; its refusal is one line on stderr (with each bad item) and exit 1."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.errors import ApiError

    try:
        return call()
    except ApiError as error:
        items = (error.details or {}).get("items") or []
        named = "".join(f"; item {i['index']} {i['value']!r}: {i['reason']}" for i in items)
        typer.echo(f"error: {error.message}{named}", err=True)
        raise typer.Exit(1) from None


def export(
    workspace: Annotated[uuid.UUID, typer.Option(help="The workspace to export from.")],
    out: Annotated[Path, typer.Option(help="The .wacz file to write (replaced if it exists).")],
    evidence: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ID", help="An evidence id to export (repeat it); every archived item if none."
        ),
    ] = None,
    max_bytes: Annotated[
        int | None,
        typer.Option(min=1, help="Archived bytes to copy at most (EVIDENCE_EXPORT_MAX_BYTES)."),
    ] = None,
) -> None:
    """Write a WACZ package (WARC, CDXJ index, pages, datapackage.json) of archived evidence."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import evidence_archive
    from worker.store.db import read_only_session

    with read_only_session() as session:
        chosen = _run(
            lambda: evidence_archive.select_export(
                session, OPERATOR, workspace, evidence or None, admit=False, max_bytes=max_bytes
            )
        )
    partial = out.with_name(out.name + ".partial")
    try:
        with partial.open("wb") as handle:
            exported = _run(lambda: evidence_archive.write_export(chosen, handle))
        os.replace(partial, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    _print(
        {
            "out": str(out),
            "workspace_id": str(workspace),
            "exchanges": exported.exchanges,
            "pages": exported.pages,
            "warc_bytes": exported.warc_bytes,
            "bytes": exported.package_bytes,
        }
    )
