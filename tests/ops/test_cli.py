"""The installed `evidence` console script, run as operators run it (not `python -m api.cli`)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from sqlalchemy.orm import Session

from tests.conftest import Env
from tests.support.services import create_postgres_database, drop_postgres_database

#: The script pip installed beside this interpreter (`[project.scripts]` in pyproject.toml).
EVIDENCE = Path(sys.executable).parent / "evidence"
#: Nothing listens there: a database that cannot be reached.
UNREACHABLE_DB = "postgresql://postgres@127.0.0.1:{port}/evidence"
WS = "11111111-1111-4111-8111-111111111111"


def evidence(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the installed script to completion, from a directory outside the checkout."""
    return subprocess.run(
        [str(EVIDENCE), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def throwaway_db(env: Env, tmp_path: Path) -> Iterator[str]:
    """An empty database of the suite's kind, dropped afterwards."""
    if env.db_kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'cli.db'}"
        return
    name, url = create_postgres_database()
    try:
        yield url
    finally:
        from worker.store import db

        db.make_engine(url).dispose()
        drop_postgres_database(name)


def test_the_script_is_installed() -> None:
    """`pip install` put `evidence` beside the interpreter, as the README tells operators."""
    assert EVIDENCE.is_file() and os.access(EVIDENCE, os.X_OK), EVIDENCE


def test_help_lists_every_command(tmp_path: Path) -> None:
    """`evidence --help` exits 0 and names every command; `keys --help` names its commands."""
    done = evidence("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for command in ("migrate", "api", "worker", "beat", "flower", "mcp", "enqueue", "keys"):
        assert f" {command} " in done.stdout, (command, done.stdout)
    keys = evidence("keys", "--help", cwd=tmp_path)
    assert keys.returncode == 0, keys.stderr
    for command in ("create", "list", "revoke", "rotate"):
        assert f" {command} " in keys.stdout, (command, keys.stdout)


def test_migrate_then_create_a_key(throwaway_db: str, tmp_path: Path) -> None:
    """`migrate` brings an empty database to the latest revision (twice is harmless); `keys
    create` prints the key alone on stdout's last line, and the key works for its workspaces."""
    from api.auth import authenticate
    from worker.store import db
    from worker.store.migrate import alembic_config

    env = {"EVIDENCE_DATABASE_URL": throwaway_db}
    for _ in range(2):
        done = evidence("migrate", cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "database is at the latest migration"
    engine = db.make_engine(throwaway_db)
    try:
        with engine.connect() as conn:
            current = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
        assert current == ScriptDirectory.from_config(alembic_config()).get_current_head()
        assert {"retrieval", "api_key"} <= set(sa.inspect(engine).get_table_names())

        other = str(uuid.uuid4())
        made = evidence(
            "keys", "create", "--workspace", WS, "--workspace", other, cwd=tmp_path, env=env
        )
        assert made.returncode == 0, made.stderr
        key = made.stdout.splitlines()[-1]
        assert made.stdout == f"{key}\n", "the key is alone on stdout"
        assert key not in made.stderr and "shown only once" in made.stderr
        with Session(engine) as session:
            principal = authenticate(session, f"Bearer {key}")
        assert principal.workspaces == {uuid.UUID(WS), uuid.UUID(other)}
        assert principal.scopes == {"agent:research"}
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "Usage: evidence"),
        (("no-such-command",), "No such command"),
        (("keys", "create"), "Missing option '--workspace'"),
        (("keys", "create", "--workspace", "not-a-uuid"), "Invalid value for '--workspace'"),
        (("mcp", "--transport", "pigeon"), "--transport must be stdio or http"),
        (("flower",), "EVIDENCE_FLOWER_BASIC_AUTH is not usable"),
        (
            ("enqueue", "missing.txt", "--workspace", WS, "--kind", "url_text", "--key", "k"),
            "no such file: missing.txt",
        ),
    ],
    ids=["no-args", "unknown-command", "missing-option", "bad-uuid", "bad-transport",
         "flower-without-auth", "enqueue-missing-file"],
)  # fmt: skip
def test_usage_errors_exit_2(args: tuple[str, ...], says: str, tmp_path: Path) -> None:
    """Bad arguments exit 2 with a message on stderr naming the problem (no arguments: the
    help), and no traceback."""
    done = evidence(*args, cwd=tmp_path, env={"EVIDENCE_FLOWER_BASIC_AUTH": ""})
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert says in done.stderr, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize("args", [("migrate",), ("keys", "create", "--workspace", WS)])
def test_unreachable_database_exits_1_in_one_line(
    args: tuple[str, ...], env: Env, tmp_path: Path
) -> None:
    """A database that cannot be reached exits 1 with one `error:` line naming the cause."""
    url = UNREACHABLE_DB.format(port=env.closed_port)
    done = evidence(*args, cwd=tmp_path, env={"EVIDENCE_DATABASE_URL": url})
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: cannot use the database"), done.stderr
    assert "Connection refused" in done.stderr and len(done.stderr.splitlines()) == 1
    assert done.stdout == ""
