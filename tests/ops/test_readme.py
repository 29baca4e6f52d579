"""The README stays honest: its commands exist, their options parse, its links resolve.

The commands are read from the README's shell code blocks and from inline code spans; each
`make TARGET` must be a Makefile target (`make -n`), each `evidence SUB …` a real subcommand
whose `--options` its `--help` lists. Links from the README and docs/ must reach a file (and
a heading, when they name one).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.slowdown import scaled

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: The README is the front door; the reference lives in docs/.
MAX_README_LINES = 280

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
_INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_OPTION = re.compile(r"^--[a-z][a-z0-9-]*")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: The "Commands" section of a group's help (rich's panel title, or click's plain heading).
_GROUP = re.compile(r"^\W*Commands\b", re.MULTILINE)
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")"}


def shell_blocks(markdown: str) -> list[str]:
    """The bodies of the fenced code blocks marked as shell."""
    return [body for lang, body in _FENCE.findall(markdown) if lang in _SHELL_LANGUAGES]


def inline_code(markdown: str) -> list[str]:
    """Inline code spans outside fenced blocks."""
    return _INLINE_CODE.findall(_FENCE.sub("", markdown))


def _tokens(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def logical_lines(block: str) -> list[list[str]]:
    """Tokens of each command line: backslash continuations joined, open quotes carried on."""
    lines: list[list[str]] = []
    pending = ""
    for raw in block.splitlines():
        if raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        pending += raw
        try:
            tokens = _tokens(pending)
        except ValueError:  # a quoted string spans lines
            pending += "\n"
            continue
        if tokens:
            lines.append(tokens)
        pending = ""
    assert not pending.strip(), f"unterminated command: {pending!r}"
    return lines


def commands(tokens: list[str]) -> list[list[str]]:
    """Simple commands of one line: split at `;`, `&&`, `|`, `&`; leading VAR=value dropped."""
    found: list[list[str]] = [[]]
    for token in tokens:
        if token in _SEPARATORS:
            found.append([])
        elif found[-1] or not _ASSIGNMENT.match(token):
            found[-1].append(token)
    return [command for command in found if command]


def named(markdown: str, program: str) -> list[list[str]]:
    """Every command line of the README that runs `program` (by name or path)."""
    lines = [tokens for block in shell_blocks(markdown) for tokens in logical_lines(block)]
    lines += [_tokens(span) for span in inline_code(markdown) if span.startswith(program + " ")]
    return [
        command
        for tokens in lines
        for command in commands(tokens)
        if Path(command[0]).name == program and len(command) > 1
    ]


def unactivated(block: str) -> list[str]:
    """`evidence` command lines of a shell block that run before the venv is activated."""
    activated, bare = False, []
    for tokens in logical_lines(block):
        for command in commands(tokens):
            if command[0] in (".", "source") and command[1:2] == [".venv/bin/activate"]:
                activated = True
            elif command[0] == "evidence" and not activated:
                bare.append(" ".join(command))
    return bare


def options(args: list[str]) -> list[str]:
    """The long options a command line passes (`--name=value` counts as `--name`)."""
    return [match.group(0) for arg in args if (match := _OPTION.match(arg))]


def heading_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def links(markdown: str) -> list[str]:
    """Relative link targets (no scheme, no bare anchors)."""
    return [
        target
        for target in _LINK.findall(markdown)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")
    ]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"}
    timeout = scaled(60)  # a hung command, however busy the machine
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@functools.cache  # the README names the same commands many times: one process each
def _evidence_help(path: tuple[str, ...]) -> str:
    evidence = Path(sys.executable).parent / "evidence"
    result = _run([str(evidence), *path, "--help"])
    assert result.returncode == 0, f"`evidence {' '.join(path)}` is no command: {result.stderr}"
    return result.stdout


def _subcommand(args: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """Split `evidence` arguments into the subcommand path and the rest."""
    path = (args[0],)
    while _GROUP.search(_evidence_help(path)) and len(args) > len(path):
        path = (*path, args[len(path)])
    return path, args[len(path) :]


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text(encoding="utf-8")


class TestParsing:
    """The command parser reads shell the way a shell would, for what the README uses."""

    def test_continuations_quotes_comments_and_separators(self) -> None:
        block = (
            "# a comment line\n"
            'make run    # the "whole" service\n'
            "set -a; . var/x.env; set +a && EVIDENCE_X=1 evidence enqueue f.csv \\\n"
            '  --workspace "$W" --kind url_text\n'
            'curl -d "{\\"a\\": 1,\n'
            '  \\"b\\": 2}" http://x/  # -> 200 {"c": …\n'
            ".venv/bin/python deploy/demo_site.py var/site &\n"
        )
        markdown = f"text `evidence mcp --transport http` and `evidence`\n```sh\n{block}```\n"
        assert named(markdown, "make") == [["make", "run"]]
        assert named(markdown, "evidence") == [
            ["evidence", "enqueue", "f.csv", "--workspace", "$W", "--kind", "url_text"],
            ["evidence", "mcp", "--transport", "http"],
        ]
        assert options(["enqueue", "--wait", "--out=x.jsonl", "-n", "file"]) == ["--wait", "--out"]

    def test_a_bare_evidence_before_the_venv_is_found(self) -> None:
        block = (
            ". var/dev.env\n"
            "evidence quotas show\n"
            ".venv/bin/evidence keys list\n"
            ". .venv/bin/activate  # now on PATH\n"
            "evidence migrate\n"
        )
        assert unactivated(block) == ["evidence quotas show"]

    def test_non_shell_blocks_are_ignored(self) -> None:
        markdown = '```json\n{"command": "evidence", "args": ["mcp"]}\n```\n```\nmake nope\n```\n'
        assert named(markdown, "make") == [] and named(markdown, "evidence") == []

    def test_anchors_and_links(self) -> None:
        assert heading_anchor("Under load: `make load`") == "under-load-make-load"
        assert heading_anchor("robots.txt") == "robotstxt"
        text = "[a](docs/x.md#y) [b](https://e.org/) [c](#here) [d](../deploy/README.md)"
        assert links(text) == ["docs/x.md#y", "../deploy/README.md"]


class TestReadme:
    """Every command the README shows works as written, and it stays a front door."""

    def test_it_is_short(self, readme: str) -> None:
        lines = len(readme.splitlines())
        assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move reference to docs/"

    def test_make_targets_exist(self, readme: str) -> None:
        targets = {arg for command in named(readme, "make") for arg in command[1:]}
        targets = {target for target in targets if not target.startswith("-") and "=" not in target}
        assert {"run", "test", "demo"} <= targets
        for target in sorted(targets):
            result = _run(["make", "-n", target])
            assert result.returncode == 0, f"make {target}: {result.stderr.strip()}"

    def test_evidence_commands_and_options_exist(self, readme: str) -> None:
        found = named(readme, "evidence")
        assert len(found) >= 5
        for command in found:
            path, rest = _subcommand(command[1:])
            usage = _evidence_help(path)
            for option in options(rest):
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", usage), (
                    f"`evidence {' '.join(path)}` has no option {option}"
                )

    def test_evidence_runs_from_the_venv(self) -> None:
        """A fresh shell has no `evidence` on its PATH: each shell block of the README and
        docs/operating.md that runs it activates the venv first or calls `.venv/bin/evidence`."""
        bare = []
        for page in (README, ROOT / "docs" / "operating.md"):
            for block in shell_blocks(page.read_text(encoding="utf-8")):
                bare += [f"{page.relative_to(ROOT)}: {line}" for line in unactivated(block)]
        assert not bare, "\n".join(bare)

    def test_links_resolve(self) -> None:
        pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
        missing = []
        for page in pages:
            for target in links(page.read_text(encoding="utf-8")):
                file, _, anchor = target.partition("#")
                resolved = (page.parent / file).resolve()
                if not resolved.is_file():
                    missing.append(f"{page.relative_to(ROOT)} -> {target}")
                elif anchor and resolved.suffix == ".md":
                    text = resolved.read_text(encoding="utf-8")
                    anchors = {heading_anchor(h) for h in _HEADING.findall(_FENCE.sub("", text))}
                    if anchor not in anchors:
                        missing.append(f"{page.relative_to(ROOT)} -> {target} (no such heading)")
        assert not missing, "\n".join(missing)
