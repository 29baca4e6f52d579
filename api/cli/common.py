"""What the `evidence` commands share: database errors as one line, flags' values checked."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import typer

T = TypeVar("T")


@contextmanager
def database_errors() -> Iterator[None]:
    """A database that cannot be used is one line on stderr and exit 1, not a long traceback
    (the driver's first line names the host and the cause, never the password)."""
    from sqlalchemy.exc import OperationalError

    try:
        yield
    except OperationalError as exc:
        cause = str(exc.orig or exc).strip().splitlines()[0]
        typer.echo(f"error: cannot use the database (EVIDENCE_DATABASE_URL): {cause}", err=True)
        raise typer.Exit(1) from None


def flag_value(parse: Callable[[], T], flag: str) -> T:
    """A flag's parsed value; a ValueError is click's usage error (exit 2) naming the flag."""
    try:
        return parse()
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=f"'{flag}'") from None
