"""`evidence watches …`: create, list, show, update, delete; a refusal is stderr and exit 1."""

from __future__ import annotations

import json
import uuid

from typer.testing import CliRunner

URL = "https://news.example.org/cli"


def _run(*argv: str) -> tuple[int, str, str]:
    from api.cli.main import app

    done = CliRunner().invoke(app, ["watches", *argv], catch_exceptions=False)
    return done.exit_code, done.stdout, done.stderr


def test_create_list_show_update_delete() -> None:
    workspace = str(uuid.uuid4())
    code, out, _ = _run("create", "--workspace", workspace, "--url", URL, "--interval", "900")
    assert code == 0, out
    watch = json.loads(out)["watch"]
    assert watch["interval_seconds"] == 900 and watch["enabled"] is True
    code, out, _ = _run("list", "--workspace", workspace)
    assert code == 0 and [json.loads(line) for line in out.splitlines()] == [watch]
    code, out, _ = _run("list", "--workspace", workspace, "--table")
    assert code == 0 and watch["id"][:8] in out
    code, out, _ = _run("update", watch["id"], "--interval", "300", "--disabled")
    changed = json.loads(out)["watch"]
    assert code == 0 and changed["interval_seconds"] == 300 and changed["enabled"] is False
    code, out, _ = _run("show", watch["id"])
    assert code == 0 and json.loads(out) == {"watch": changed}
    code, _, err = _run("delete", watch["id"])
    assert code == 0 and "deleted" in err
    code, out, err = _run("show", watch["id"])
    assert code == 1 and out == "" and "no such watch" in err


def test_refusals_are_one_line_and_exit_1() -> None:
    workspace = str(uuid.uuid4())
    base = ("create", "--workspace", workspace, "--url")
    code, _, err = _run(*base, URL, "--interval", "60")
    assert code == 1 and err.startswith("error: interval_seconds:"), err
    code, _, err = _run(*base, "http://news.example.org/", "--interval", "600")
    assert code == 1 and err.startswith("error: url:"), err
    code, _, err = _run("update", str(uuid.uuid4()), "--interval", "600")
    assert code == 1 and "no such watch" in err
