"""docs/operating.md's process tables say what deploy/Procfile runs, and its batch enqueue
paragraph the defaults `evidence enqueue` has, so neither can drift from the code again.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[2]
PROCFILE = ROOT / "deploy" / "Procfile"
OPERATING = ROOT / "docs" / "operating.md"
#: The deployment table's processes that `make run` runs too, by their Procfile names.
DEPLOYED_AS = {
    "API": "api",
    "retrieval worker": "worker",
    "sweeper": "sweeper",
    "beat": "beat",
    "Flower": "flower",
}
_CODE = re.compile(r"`([^`]+)`")


def procfile(text: str) -> dict[str, str]:
    """Process name to command line."""
    entries = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, command = line.partition(":")
            entries[name.strip()] = command.strip()
    return entries


def table(markdown: str, header: str) -> list[list[str]]:
    """The cells of each row of the table whose header row is `header`."""
    lines = markdown.splitlines()
    start = lines.index(header) + 2  # past the header and the |---| row
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        rows.append([cell.strip().replace("\\|", "|") for cell in cells])
    return rows


def code(cell: str) -> str:
    """The first code span of a cell."""
    match = _CODE.search(cell)
    assert match, f"no command in {cell!r}"
    return match.group(1)


def options(command: str) -> dict[str, str | None]:
    """The `--name value` options a command line gives, optional `[...]` ones left out."""
    tokens = shlex.split(re.sub(r"\[[^]]*\]", "", command))
    found: dict[str, str | None] = {}
    for n, token in enumerate(tokens):
        if token.startswith("--"):
            following = tokens[n + 1] if n + 1 < len(tokens) else None
            found[token] = None if following is None or following.startswith("--") else following
    return found


def enqueue_default(name: str) -> object:
    """The default of one of `evidence enqueue`'s parameters, from the command itself."""
    from api.cli.main import app

    command = typer.main.get_command(app).commands["enqueue"]  # type: ignore[attr-defined]
    [param] = [p for p in command.params if p.name == name]
    return param.default


@pytest.fixture(scope="module")
def operating() -> str:
    return OPERATING.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def processes() -> dict[str, str]:
    return procfile(PROCFILE.read_text(encoding="utf-8"))


class TestParsing:
    """The readers see what the files say."""

    def test_procfile_table_and_options(self) -> None:
        assert procfile("# note\nweb: evidence api --port 1\n\nbeat: evidence beat\n") == {
            "web": "evidence api --port 1",
            "beat": "evidence beat",
        }
        markdown = "| a | b |\n|---|---|\n| `x` | `y --q 1\\|2` |\n| z | w |\n\ntext\n"
        assert table(markdown, "| a | b |") == [["`x`", "`y --q 1|2`"], ["z", "w"]]
        assert options("evidence worker --queues a,b [--concurrency C] --idle") == {
            "--queues": "a,b",
            "--idle": None,
        }


class TestProcessTables:
    """Both tables of docs/operating.md against deploy/Procfile."""

    def test_make_run_table_is_the_procfile(
        self, operating: str, processes: dict[str, str]
    ) -> None:
        """ "Running it here": one row per Procfile process, its command exactly as run."""
        rows = table(operating, "| process | command | what |")
        documented = {code(name): code(command) for name, command, _ in rows}
        assert documented == processes

    def test_deployment_table_agrees_with_the_procfile(
        self, operating: str, processes: dict[str, str]
    ) -> None:
        """ "The processes": each process `make run` runs too gives the Procfile's options (the
        queues a worker consumes, the sweeper's pool) with the same values."""
        rows = {
            name: code(command)
            for name, command, _ in table(operating, "| process | command | how many |")
        }
        assert set(DEPLOYED_AS) <= set(rows), rows
        for name, entry in DEPLOYED_AS.items():
            documented, run = rows[name], processes[entry]
            assert shlex.split(documented)[:2] == shlex.split(run)[:2], (name, documented, run)
            given = options(run)
            for option, value in options(documented).items():
                assert option in given and given[option] == value, (name, option, value, run)


class TestEnqueueDefaults:
    """The batch enqueue paragraph quotes `evidence enqueue`'s real defaults."""

    def test_concurrency(self, operating: str) -> None:
        said = re.search(r"`--concurrency` requests in flight \((\d+)\)", operating)
        assert said, "docs/operating.md no longer says enqueue's --concurrency default"
        assert int(said.group(1)) == enqueue_default("concurrency")

    def test_api_url(self, operating: str) -> None:
        said = re.search(r"`--api`, default\s+`([^`]+)`", operating)
        assert said, "docs/operating.md no longer says enqueue's --api default"
        assert said.group(1) == enqueue_default("api")
