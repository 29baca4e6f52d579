"""Pure tests of `evidence enqueue` input parsing and mutation_id derivation."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from uuid import UUID

import pytest

from api.enqueue.input import (
    MUTATION_NAMESPACE,
    InputError,
    Line,
    LineError,
    check_language,
    check_url,
    detect_format,
    mutation_id,
    parse,
    read_input,
)

WS = UUID("11111111-1111-4111-8111-111111111111")
#: mutation_id(WS, "url_text", "en", "https://a.example/1") as first released; never changes.
PINNED = UUID("734d530f-6a72-5984-9b1f-d940ba0c76c0")
OTHER_WS = UUID("22222222-2222-4222-8222-222222222222")


def lines(text: str) -> list[str]:
    """Split `text` the way a file opened with newline='' iterates."""
    return io.StringIO(text, newline="").readlines()


def plain(text: str, kind: str = "url_text", language: str | None = None) -> list[object]:
    return list(parse(lines(text), "plain", kind, language))


def csv_(text: str, kind: str = "url_text", language: str | None = None) -> list[object]:
    return list(parse(lines(text), "csv", kind, language))


def jsonl(text: str, kind: str = "url_text", language: str | None = None) -> list[object]:
    return list(parse(lines(text), "jsonl", kind, language))


class TestDetectFormat:
    @pytest.mark.parametrize(
        ("name", "fmt"),
        [
            ("urls.csv", "csv"),
            ("URLS.CSV", "csv"),
            ("a.jsonl", "jsonl"),
            ("a.ndjson", "jsonl"),
            ("a.txt", "plain"),
            ("a", "plain"),
            ("a.json", "plain"),
            ("-", "plain"),
            ("dir.csv/urls", "plain"),
        ],
    )
    def test_extension_picks_format(self, name: str, fmt: str) -> None:
        """The extension alone decides the format; anything unknown (and stdin) is plain."""
        assert detect_format(name) == fmt


class TestPlain:
    def test_urls_numbered_by_physical_line(self) -> None:
        """Blank lines and comments are skipped but still count for line numbers."""
        text = "# header\nhttps://a.example/1\n\n   \nhttps://a.example/2\n  # indented\n"
        assert plain(text) == [
            Line(2, "https://a.example/1", "url_text", None),
            Line(5, "https://a.example/2", "url_text", None),
        ]

    def test_defaults_apply(self) -> None:
        """Every plain line takes the default kind and language."""
        assert plain("https://v.example/x\n", "published_captions", "pt-BR") == [
            Line(1, "https://v.example/x", "published_captions", "pt-BR")
        ]

    def test_trailing_comment_and_whitespace_stripped(self) -> None:
        """A ` # comment` after the URL and surrounding spaces/CRLF are dropped."""
        assert plain("  https://a.example/p   # the paper\r\n") == [
            Line(1, "https://a.example/p", "url_text", None)
        ]

    def test_fragment_is_kept(self) -> None:
        """A `#` inside the URL (a fragment) is part of the URL, not a comment."""
        assert plain("https://a.example/p#sec-2\n") == [
            Line(1, "https://a.example/p#sec-2", "url_text", None)
        ]

    def test_bad_lines_reported_with_numbers_and_skipped(self) -> None:
        """Invalid lines become LineErrors carrying their line number; good lines still parse."""
        text = "https://ok.example/1\nnot a url\nftp://files.example/x\nhttps://\nhttps://ok.example/2\n"
        result = plain(text)
        assert [type(e).__name__ for e in result] == [
            "Line",
            "LineError",
            "LineError",
            "LineError",
            "Line",
        ]
        assert [e.number for e in result] == [1, 2, 3, 4, 5]
        assert "ftp://files.example/x" in result[2].message  # type: ignore[union-attr]

    def test_no_trailing_newline(self) -> None:
        """The last line is read even without a final newline."""
        assert plain("https://a.example/1") == [Line(1, "https://a.example/1", "url_text", None)]

    def test_empty_input(self) -> None:
        """An empty or comment-only file yields nothing."""
        assert plain("") == []
        assert plain("# nothing\n\n") == []


class TestCheckUrl:
    @pytest.mark.parametrize(
        "url",
        [
            "https://example.com",
            "http://example.com/a?b=c#d",
            "HTTPS://EXAMPLE.COM/x",
            "https://[2001:db8::1]:8443/x",
            "https://exemple.fr/é",
            # The WHATWG URL Standard (the server's parser too) skips any run of slashes
            # before the host: this is https://path/, left for the server's guard to judge.
            "https:///path",
        ],
    )
    def test_accepts(self, url: str) -> None:
        """http(s) URLs with a host are accepted, including IPv6 literals and non-ASCII paths."""
        assert check_url(url) is None

    @pytest.mark.parametrize(
        "url",
        [
            "",
            "example.com",
            "/relative/path",
            "mailto:a@example.com",
            "ftp://example.com/x",
            "https://",
            "https:///",
            "https://exa mple.com",
            "https://example.com/\x00",
            "https://[::1/x",
            "https://example.com:99999/",
            "https://::1/",
            "https://93.184.215.14:443:22/",
            "https://127.0.0.1:+443/",
            "https://93.184.215.14:443abc/",
            "https://example.com/" + "a" * 2048,
            "https://example.com/\udcff",
            None,
            42,
        ],
    )
    def test_rejects(self, url: object) -> None:
        """Anything that is not an http(s) URL with a host, or is too long, is rejected."""
        assert check_url(url) is not None


class TestCheckLanguage:
    @pytest.mark.parametrize("tag", ["en", "pt-BR", "zh-Hant-TW", "de-1996", "EN"])
    def test_accepts(self, tag: str) -> None:
        """Tags matching the input schema's pattern are accepted as given."""
        assert check_language(tag) is None

    @pytest.mark.parametrize("tag", ["e", "languages", "en_US", "en-", "1a", "", "x" * 36])
    def test_rejects(self, tag: str) -> None:
        """Tags outside the schema's pattern or length are rejected."""
        assert check_language(tag) is not None


class TestCsv:
    def test_overrides_and_defaults(self) -> None:
        """`kind`/`language` cells override the defaults; empty cells fall back to them."""
        text = (
            "url,kind,language\n"
            "https://a.example/1,,\n"
            "https://a.example/2,published_captions,fr\n"
            "https://a.example/3,, \n"
        )
        assert csv_(text, "url_text", "en") == [
            Line(2, "https://a.example/1", "url_text", "en"),
            Line(3, "https://a.example/2", "published_captions", "fr"),
            Line(4, "https://a.example/3", "url_text", "en"),
        ]

    def test_url_only_and_extra_columns(self) -> None:
        """Only `url` is required; unknown columns are ignored; header case does not matter."""
        text = "Title, URL \nA paper,https://a.example/1\n"
        assert csv_(text) == [Line(2, "https://a.example/1", "url_text", None)]

    def test_quoted_multiline_cell_keeps_start_line(self) -> None:
        """A row spanning lines is numbered by its first line, and later rows stay in step."""
        text = 'url,note\nhttps://a.example/1,"two\nlines"\nhttps://a.example/2,x\n'
        assert csv_(text) == [
            Line(2, "https://a.example/1", "url_text", None),
            Line(4, "https://a.example/2", "url_text", None),
        ]

    def test_blank_and_comment_rows_skipped(self) -> None:
        """Blank rows and rows starting with `#` are skipped before and after the header."""
        text = "# exported\n\nurl\n# note\nhttps://a.example/1\n,\n"
        assert csv_(text) == [Line(5, "https://a.example/1", "url_text", None)]

    def test_bad_rows_reported_and_skipped(self) -> None:
        """Bad URL, kind, language, field count and quoting each give a numbered LineError."""
        text = (
            "url,kind,language\n"
            "https://a.example/ok,,\n"
            "nope,,\n"
            "https://a.example/1,video,\n"
            "https://a.example/2,,english!\n"
            "https://a.example/3,url_text,en,extra\n"
            '"https://a.example/4"x,,\n'
            ",url_text,en\n"
            "https://a.example/last,,\n"
        )
        result = csv_(text)
        errors = {e.number: e.message for e in result if isinstance(e, LineError)}
        assert sorted(errors) == [3, 4, 5, 6, 7, 8]
        assert "video" in errors[4] and "english!" in errors[5]
        assert "got 4" in errors[6] and "malformed CSV" in errors[7]
        assert [e.number for e in result if isinstance(e, Line)] == [2, 9]

    def test_unterminated_quote_at_end(self) -> None:
        """An unterminated quote at end of file is one error, not a hang or a crash."""
        result = csv_('url\nhttps://a.example/1\n"https://a.example/2\n')
        assert result[0] == Line(2, "https://a.example/1", "url_text", None)
        assert isinstance(result[1], LineError) and result[1].number == 3
        assert len(result) == 2

    def test_missing_url_column_is_file_error(self) -> None:
        """A header without `url` makes the whole file unusable."""
        with pytest.raises(InputError, match="url"):
            csv_("link,kind\nhttps://a.example/1,url_text\n")

    def test_short_row_pads(self) -> None:
        """A row with fewer cells than the header treats the missing ones as empty."""
        assert csv_("url,kind,language\nhttps://a.example/1\n", language="de") == [
            Line(2, "https://a.example/1", "url_text", "de")
        ]


class TestJsonl:
    def test_objects_with_overrides(self) -> None:
        """`kind`/`language` keys override defaults, null/missing fall back, other keys pass."""
        text = (
            '{"url": "https://a.example/1"}\n'
            '{"url": "https://a.example/2", "kind": "published_captions", "language": "fr"}\n'
            '{"url": "https://a.example/3", "kind": null, "language": null, "id": 7}\n'
        )
        assert jsonl(text, "url_text", "en") == [
            Line(1, "https://a.example/1", "url_text", "en"),
            Line(2, "https://a.example/2", "published_captions", "fr"),
            Line(3, "https://a.example/3", "url_text", "en"),
        ]

    def test_bad_lines_reported_and_skipped(self) -> None:
        """Malformed JSON, non-objects, missing/invalid fields give numbered LineErrors."""
        text = (
            '{"url": "https://a.example/ok"}\n'
            '{"url": "https://a.example/1"\n'
            '["https://a.example/2"]\n'
            '{"kind": "url_text"}\n'
            '{"url": 5}\n'
            '{"url": "https://a.example/3", "kind": "audio"}\n'
            '{"url": "https://a.example/4", "language": ""}\n'
            '{"url": "https://a.example/5", "language": 12}\n'
            "\n"
            "# comment\n"
            '{"url": "https://a.example/last"}\n'
        )
        result = jsonl(text)
        errors = {e.number: e.message for e in result if isinstance(e, LineError)}
        assert sorted(errors) == [2, 3, 4, 5, 6, 7, 8]
        assert "malformed JSON" in errors[2] and "list" in errors[3]
        assert "missing 'url'" in errors[4] and "audio" in errors[6]
        assert [e.number for e in result if isinstance(e, Line)] == [1, 11]


class TestReadInput:
    def test_reads_file_by_extension(self, tmp_path: Path) -> None:
        """A .jsonl file is parsed as JSON Lines and a UTF-8 BOM is ignored."""
        path = tmp_path / "in.jsonl"
        path.write_bytes(b'\xef\xbb\xbf{"url": "https://a.example/1"}\n')
        assert list(read_input(str(path), "url_text")) == [
            Line(1, "https://a.example/1", "url_text", None)
        ]

    def test_undecodable_bytes_invalidate_only_their_line(self, tmp_path: Path) -> None:
        """Bytes that are not UTF-8 make their line invalid without stopping the file."""
        path = tmp_path / "in.txt"
        path.write_bytes(b"https://a.example/\xff\nhttps://a.example/2\n")
        result = list(read_input(str(path), "url_text"))
        assert result[0] == LineError(1, "line is not valid UTF-8")
        assert result[1] == Line(2, "https://a.example/2", "url_text", None)

    def test_stdin_is_plain(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """`-` reads plain URLs from stdin and leaves stdin usable afterwards."""
        raw = io.BytesIO(b"# list\nhttps://a.example/1\n")
        fake_stdin = io.TextIOWrapper(raw)
        monkeypatch.setattr(sys, "stdin", fake_stdin)
        assert list(read_input("-", "url_text", "en")) == [
            Line(2, "https://a.example/1", "url_text", "en")
        ]
        assert not raw.closed


class TestMutationId:
    BASE = (WS, "url_text", "en", "https://a.example/1")

    def test_deterministic_uuid5(self) -> None:
        """The same inputs always give the same UUIDv5 under the fixed namespace."""
        first = mutation_id(*self.BASE)
        assert first == mutation_id(*self.BASE)
        assert first.version == 5
        assert UUID("e6559747-8493-4030-866a-51510baeb784") == MUTATION_NAMESPACE

    def test_pinned_value(self) -> None:
        """The derivation is frozen: changing it would break resuming old files."""
        assert mutation_id(*self.BASE) == mutation_id(*self.BASE, None) == PINNED

    @pytest.mark.parametrize(
        "changed",
        [
            (OTHER_WS, "url_text", "en", "https://a.example/1", None),
            (WS, "published_captions", "en", "https://a.example/1", None),
            (WS, "url_text", "fr", "https://a.example/1", None),
            (WS, "url_text", None, "https://a.example/1", None),
            (WS, "url_text", "en", "https://a.example/2", None),
            (WS, "url_text", "en", "https://a.example/1/", None),
            (WS, "url_text", "en", "https://a.example/1", "run-2"),
            (WS, "url_text", "en", "https://a.example/1", ""),
        ],
    )
    def test_sensitive_to_each_input(self, changed: tuple) -> None:
        """Changing the workspace, kind, language, URL or batch label changes the id."""
        assert mutation_id(*changed) != mutation_id(*self.BASE)

    def test_batch_labels_differ(self) -> None:
        """Two batch labels give two ids, so a deliberate re-fetch is possible."""
        assert mutation_id(*self.BASE, "a") != mutation_id(*self.BASE, "b")

    def test_no_language_equals_empty_language(self) -> None:
        """A missing language and "" hash the same, as the issue specifies (language or "")."""
        assert mutation_id(WS, "url_text", None, "https://a.example/1") == mutation_id(
            WS, "url_text", "", "https://a.example/1"
        )

    def test_fields_cannot_bleed_into_each_other(self) -> None:
        """Moving text between fields never collides (the name is a JSON array)."""
        assert mutation_id(WS, "url_text", "en", "https://a.example/1", "x") != mutation_id(
            WS, "url_text", "en", "https://a.example/1x"
        )

    def test_workspace_case_does_not_matter(self) -> None:
        """The workspace is hashed in its canonical form."""
        upper = UUID(str(WS).upper())
        assert mutation_id(upper, "url_text", "en", "u") == mutation_id(WS, "url_text", "en", "u")
