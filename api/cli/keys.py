"""`evidence keys`: create, list, revoke and rotate API keys (shown by id and prefix, the key
itself only once, when it is made)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from api.cli.common import database_errors, flag_value

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from api.auth import NewKey

app = typer.Typer(help="Manage API keys.", no_args_is_help=True)

KeyId = Annotated[
    uuid.UUID, typer.Argument(metavar="KEY_ID", help="The key's id (`evidence keys list`).")
]


def _expiry(expires_in: str | None, expires_at: str | None, now: datetime) -> datetime | None:
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.cli.key_admin import parse_duration, parse_instant

    if expires_in is not None and expires_at is not None:
        raise typer.BadParameter("give --expires-in or --expires-at, not both")
    if expires_in is not None:
        return now + flag_value(lambda: parse_duration(expires_in), "--expires-in")
    if expires_at is not None:
        return flag_value(lambda: parse_instant(expires_at, now), "--expires-at")
    return None


def _print_new_key(what: str, key: NewKey) -> None:
    """Say on stderr what was made; the secret alone on stdout's last line (scripts take it)."""
    typer.echo(f"{what}: key {key.id} ({key.prefix}…); it is shown only once:", err=True)
    typer.echo(key.secret)


@app.command("create")
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
    with database_errors():
        key = db.with_transient_retry(
            lambda s: issue_key(s, list(workspace), list(scope), now, until)
        )
    expiry = f", expires {until:%Y-%m-%d %H:%M:%S}Z" if until is not None else ""
    _print_new_key(f"created for {len(workspace)} workspace(s){expiry}", key)


@app.command("list")
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
    with database_errors(), db.session_scope(readonly=True) as session:
        documents = [document(k, now) for k in keys.list_keys(session)]
    lines = [json.dumps(d) for d in documents] if as_json else table(documents)
    for line in lines:
        typer.echo(line)


def _missing_key(key_id: uuid.UUID) -> typer.Exit:
    typer.echo(f"error: no key has the id {key_id}", err=True)
    return typer.Exit(1)


@app.command("revoke")
def keys_revoke(key_id: KeyId) -> None:
    """Revoke a key now: every API and MCP process refuses it (401) within 5 s."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from worker.domain import clock
    from worker.store import db, keys

    def revoke(session: Session) -> tuple[str, datetime] | None:
        keys.revoke_key(session, key_id, clock.now())
        key = keys.get_key(session, key_id)
        return None if key is None or key.revoked_at is None else (key.prefix, key.revoked_at)

    with database_errors():
        revoked = db.with_transient_retry(revoke)
    if revoked is None:
        raise _missing_key(key_id)
    prefix, at = revoked
    typer.echo(f"revoked key {key_id} ({prefix}…) at {at:%Y-%m-%d %H:%M:%S}Z", err=True)


@app.command("rotate")
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

    wait = flag_value(lambda: parse_duration(grace), "--grace") if grace else timedelta(0)
    now = clock.now()
    with database_errors():
        key = db.with_transient_retry(lambda s: rotate_key(s, key_id, now, wait))
    if key is None:
        raise _missing_key(key_id)
    old = f"at {now + wait:%Y-%m-%d %H:%M:%S}Z" if wait else "now"
    _print_new_key(f"replaces {key_id} (revoked {old})", key)
