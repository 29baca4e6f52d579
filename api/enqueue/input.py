"""Read `evidence enqueue` input files and derive each line's deterministic mutation_id.

Three formats, chosen by extension (`detect_format`): `.csv` (a header with a `url` column and
optional `kind`/`language` columns that override the defaults), `.jsonl`/`.ndjson` (one object
per line with `url` and optional `kind`/`language`; other keys are ignored) and anything else as
plain text (one URL per line). `-` reads stdin as plain text. In every format blank lines and
lines starting with `#` are skipped; plain lines may end with a ` # comment`.

Parsing never raises for a bad line: it yields `LineError(number, message)` and goes on, so one
typo never aborts a 10 000-line batch. Only a file-level problem (a CSV without a `url` column)
raises `InputError`. Bytes that are not UTF-8 are kept as surrogates and make their line invalid.

The client checks the shape of each line (an http(s) URL with a host, at most 2 048 characters,
a known kind, a BCP 47-looking language); whether a URL is safe to fetch is the server's call.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal
from uuid import UUID, uuid5

from worker.domain import urls

#: Namespace of every enqueue mutation_id. Never change it: old files would stop resuming.
MUTATION_NAMESPACE = UUID("e6559747-8493-4030-866a-51510baeb784")
KINDS = ("url_text", "published_captions")
MAX_URL_CHARS = 2048  # the input schema's maxLength for `url`
MAX_LANGUAGE_CHARS = 35
LANGUAGE_PATTERN = re.compile(r"[a-zA-Z]{2,8}(?:-[a-zA-Z0-9]{1,8})*")
URL_SCHEMES = ("http", "https")
STDIN = "-"
# UTF-8 (a BOM is dropped); undecodable bytes become surrogates so their line alone is invalid.
TEXT_OPTIONS: dict[str, Any] = {"encoding": "utf-8-sig", "errors": "surrogateescape", "newline": ""}

Format = Literal["plain", "csv", "jsonl"]


@dataclass(frozen=True)
class Line:
    """One valid input entry, numbered by its (first) physical line in the file."""

    number: int
    url: str
    kind: str
    language: str | None


@dataclass(frozen=True)
class LineError:
    """One input entry that cannot be submitted, and why."""

    number: int
    message: str


class InputError(Exception):
    """Raised when the whole input is unusable (no `url` column in a CSV header)."""


Entry = Line | LineError


def detect_format(path: str) -> Format:
    """Pick the input format from the file name's extension (stdin is plain)."""
    lowered = path.lower()
    if lowered.endswith(".csv"):
        return "csv"
    if lowered.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    return "plain"


def mutation_id(
    workspace: UUID, kind: str, language: str | None, url: str, batch: str | None = None
) -> UUID:
    """Derive the UUIDv5 that makes re-running a file idempotent."""
    parts = [str(workspace), kind, language or "", url]
    if batch is not None:
        parts.append(batch)
    name = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))
    return uuid5(MUTATION_NAMESPACE, name)


def check_kind(kind: object) -> str | None:
    """Return why `kind` is not acceptable, or None."""
    if kind in KINDS:
        return None
    return f"kind must be one of {', '.join(KINDS)}, got {kind!r}"


def check_language(language: object) -> str | None:
    """Return why `language` is not an acceptable language tag, or None."""
    if (
        isinstance(language, str)
        and len(language) <= MAX_LANGUAGE_CHARS
        and LANGUAGE_PATTERN.fullmatch(language)
    ):
        return None
    return f"language must be a tag like 'en' or 'pt-BR', got {language!r}"


def check_url(url: object) -> str | None:
    """Return why `url` is not an http(s) URL with a host, or None."""
    if not isinstance(url, str) or not url:
        return f"url must be a non-empty string, got {url!r}"
    if _undecodable(url):
        return "line is not valid UTF-8"
    if len(url) > MAX_URL_CHARS:
        return f"url is longer than {MAX_URL_CHARS} characters"
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        return f"url contains spaces or control characters: {url!r}"
    # The server's parser (the WHATWG URL Standard), so a line passes here only if it can pass
    # there; whether it is safe to fetch is still the server's call.
    parsed = urls.parse(url)
    if isinstance(parsed, urls.UrlRefusal):
        return f"not a URL ({parsed.reason}): {url!r}"
    if parsed.scheme not in URL_SCHEMES or not parsed.has_host:
        return f"not an http(s) URL with a host: {url!r}"
    return None


def make_entry(
    number: int, url: object, kind: object, language: object, defaults: tuple[str, str | None]
) -> Entry:
    """Validate one entry's fields, falling back to the defaults for an empty kind/language."""
    kind = kind if kind not in (None, "") else defaults[0]
    language = language if language not in (None, "") else defaults[1]
    if isinstance(url, str):
        url = url.strip()
    problem = check_url(url) or check_kind(kind)
    if problem is None and language is not None:
        problem = check_language(language)
    if problem is not None:
        return LineError(number, problem)
    assert isinstance(url, str) and isinstance(kind, str)
    assert language is None or isinstance(language, str)
    return Line(number, url, kind, language)


def parse_plain(lines: Iterable[str], kind: str, language: str | None) -> Iterator[Entry]:
    """Parse a plain URL list: one URL per line, with optional ` # comment`."""
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        url = re.split(r"\s+#", text, maxsplit=1)[0]
        yield make_entry(number, url, None, None, (kind, language))


def parse_jsonl(lines: Iterable[str], kind: str, language: str | None) -> Iterator[Entry]:
    """Parse JSON Lines: one object with `url` and optional `kind`/`language` per line."""
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        if _undecodable(text):
            yield LineError(number, "line is not valid UTF-8")
            continue
        try:
            obj = json.loads(text)
        except ValueError as exc:
            yield LineError(number, f"malformed JSON: {exc}")
            continue
        if not isinstance(obj, dict):
            yield LineError(number, f"expected a JSON object, got {type(obj).__name__}")
            continue
        if "url" not in obj:
            yield LineError(number, "missing 'url'")
            continue
        entry_kind, entry_language = obj.get("kind"), obj.get("language")
        if entry_language == "":
            yield LineError(number, "language must not be empty")  # "" is no tag; omit it
            continue
        yield make_entry(number, obj["url"], entry_kind, entry_language, (kind, language))


def parse_csv(lines: Iterable[str], kind: str, language: str | None) -> Iterator[Entry]:
    """Parse CSV with a header naming a `url` column; `kind`/`language` cells override defaults."""
    reader = csv.reader(lines, strict=True)
    columns: dict[str, int] | None = None
    previous = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield LineError(previous + 1, f"malformed CSV: {exc}")
            if reader.line_num == previous:
                return
            previous = reader.line_num
            continue
        number, previous = previous + 1, reader.line_num
        if not any(cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
            continue
        if columns is None:
            columns = {name.strip().lower(): i for i, name in enumerate(row)}
            if "url" not in columns:
                raise InputError(f"line {number}: the CSV header has no 'url' column: {row!r}")
            continue
        if len(row) > len(columns):
            yield LineError(number, f"expected {len(columns)} fields, got {len(row)}")
            continue
        cells = [*row, *[""] * (len(columns) - len(row))]
        url, row_kind, row_language = (
            cells[columns[name]].strip() if name in columns else None
            for name in ("url", "kind", "language")
        )
        yield make_entry(number, url, row_kind, row_language, (kind, language))


PARSERS = {"plain": parse_plain, "csv": parse_csv, "jsonl": parse_jsonl}


def parse(
    lines: Iterable[str], fmt: Format, kind: str, language: str | None = None
) -> Iterator[Entry]:
    """Parse `lines` in format `fmt`, yielding a Line or LineError per entry."""
    return PARSERS[fmt](lines, kind, language)


def read_input(path: str, kind: str, language: str | None = None) -> Iterator[Entry]:
    """Stream the entries of the file at `path` (stdin for `-`), closing it when exhausted."""
    if path == STDIN:
        stream = io.TextIOWrapper(sys.stdin.buffer, **TEXT_OPTIONS)
        try:
            yield from parse(stream, "plain", kind, language)
        finally:
            stream.detach()  # leave the process's stdin open
        return
    with open(path, **TEXT_OPTIONS) as handle:
        yield from parse(handle, detect_format(path), kind, language)


def _undecodable(text: str) -> bool:
    """Tell whether `text` holds bytes that were not UTF-8 (surrogate escapes)."""
    return any("\udc80" <= ch <= "\udcff" for ch in text)
