"""WebVTT to the W3C specification's parser, rule by rule; each case id names its section.

Each case is a whole file given to `parse_captions` (what published_captions answers): the
segments (start, end, text) the specification's parser yields, or the failure reason.
"""

from pathlib import Path

import pytest

from worker.content.captions import CaptionError, parse_captions
from worker.content.webvtt_spec import (
    NotWebVTT,
    cue_text,
    parse_timestamp,
    parse_timings,
    parse_webvtt,
)
from worker.domain.reasons import Reason

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "captions"
CUE = "00:01.000 --> 00:02.000\nhi\n"
HI = [(1000, 2000, "hi")]
INVALID = Reason.INVALID_CAPTIONS
NONE = Reason.NO_CAPTIONS

Expected = list[tuple[int, int, str]] | Reason


def case(section: str, rule: str, body: str, expected: Expected) -> object:
    """A parametrized case whose id is `section/rule`."""
    return pytest.param(body, expected, id=f"{section}/{rule}")


FILE = "file-parsing"
SIGNATURE = [
    case(FILE, "empty-file-is-not-webvtt", "", INVALID),
    case(FILE, "bom-only-is-not-webvtt", "\ufeff", INVALID),
    case(FILE, "shorter-than-six-characters", "WEBVT", INVALID),
    case(FILE, "exactly-webvtt-is-a-file-without-cues", "WEBVTT", NONE),
    case(FILE, "webvtt-then-line-feed-no-cues", "WEBVTT\n", NONE),
    case(FILE, "bom-then-signature", "\ufeffWEBVTT\n\n" + CUE, HI),
    case(FILE, "text-after-bom", "\ufeffhello\nWEBVTT\n\n" + CUE, INVALID),
    case(FILE, "tab-after-bom", "\ufeff\tWEBVTT\n\n" + CUE, INVALID),
    case(FILE, "garbage-after-bom", "\ufeff\ufeffWEBVTT\n\n" + CUE, INVALID),
    case(FILE, "line-feed-before-signature", "\nWEBVTT\n\n" + CUE, INVALID),
    case(FILE, "crlf-before-signature", "\r\nWEBVTT\n\n" + CUE, INVALID),
    case(FILE, "space-before-signature", " WEBVTT\n\n" + CUE, INVALID),
    case(FILE, "lower-case-signature", "webvtt\n\n" + CUE, INVALID),
    case(FILE, "seventh-character-a-letter", "WEBVTTX\n\n" + CUE, INVALID),
    case(FILE, "seventh-character-a-hyphen", "WEBVTT-title\n\n" + CUE, INVALID),
    case(FILE, "space-then-title", "WEBVTT title text\n\n" + CUE, HI),
    case(FILE, "tab-then-title", "WEBVTT\ttitle\n\n" + CUE, HI),
    case(FILE, "crlf-line-terminators", "WEBVTT\r\n\r\n" + CUE.replace("\n", "\r\n"), HI),
    case(FILE, "cr-line-terminators", "WEBVTT\r\r" + CUE.replace("\n", "\r"), HI),
    case(FILE, "nul-after-signature-is-not-a-separator", "WEBVTT\x00\n\n" + CUE, INVALID),
    case(FILE, "prose-is-not-webvtt", "Just prose.", INVALID),
    case(FILE, "headerless-cues-are-not-webvtt", CUE, INVALID),
]
HEADER = [
    case(FILE, "header-lines-then-blank", "WEBVTT\nKind: captions\nLanguage: en\n\n" + CUE, HI),
    case(FILE, "cue-right-after-signature-line", "WEBVTT\n" + CUE, HI),
    case(FILE, "cue-right-after-header-line", "WEBVTT\nKind: captions\n" + CUE, HI),
    case(FILE, "many-blank-lines-after-header", "WEBVTT\n\n\n\n\n" + CUE, HI),
    case(FILE, "header-only-no-cues", "WEBVTT\nKind: captions\n", NONE),
]
BLOCK = "collect-a-webvtt-block"
BLOCKS = [
    case(BLOCK, "identifier-then-timings", "WEBVTT\n\nintro\n" + CUE, HI),
    case(
        BLOCK,
        "no-blank-line-between-cues",
        "WEBVTT\n\n00:01.000 --> 00:02.000\na\n00:03.000 --> 00:04.000\nb\n",
        [(1000, 2000, "a"), (3000, 4000, "b")],
    ),
    case(
        BLOCK,
        "timings-line-third-starts-a-new-block",
        "WEBVTT\n\nfirst\nsecond\n00:01.000 --> 00:02.000\nhi\n",
        HI,
    ),
    case(BLOCK, "region-before-cues", "WEBVTT\n\nREGION\nid:r width:40%\n\n" + CUE, HI),
    case(
        BLOCK,
        "region-settings-on-the-keyword-line-is-no-region",
        "WEBVTT\n\nREGION id:r\n\n" + CUE,
        HI,
    ),
    case(BLOCK, "region-keyword-then-spaces", "WEBVTT\n\nREGION  \nid:r\n\n" + CUE, HI),
    case(
        BLOCK,
        "region-after-a-cue-is-ignored",
        "WEBVTT\n\n" + CUE + "\nREGION\nid:r\n\n00:03.000 --> 00:04.000\nb\n",
        [(1000, 2000, "hi"), (3000, 4000, "b")],
    ),
    case(BLOCK, "style-before-cues", "WEBVTT\n\nSTYLE\n::cue { color: red }\n\n" + CUE, HI),
    case(
        BLOCK,
        "style-after-a-cue-is-ignored",
        "WEBVTT\n\n" + CUE + "\nSTYLE\n::cue { color: red }\n\n00:03.000 --> 00:04.000\nb\n",
        [(1000, 2000, "hi"), (3000, 4000, "b")],
    ),
    case(BLOCK, "style-cannot-hold-an-arrow", "WEBVTT\n\nSTYLE\n::cue {}\n" + CUE, HI),
    case(
        BLOCK,
        "style-line-then-timings-is-a-cue-identified-style",
        "WEBVTT\n\nSTYLE\n" + CUE,
        HI,
    ),
    case(BLOCK, "note-is-a-comment", "WEBVTT\n\nNOTE a comment\nspanning lines\n\n" + CUE, HI),
    case(BLOCK, "note-then-timings-is-a-cue", "WEBVTT\n\nNOTE\n" + CUE, HI),
    case(BLOCK, "note-cannot-hold-an-arrow", "WEBVTT\n\nNOTE\ncomment\n" + CUE, HI),
    case(BLOCK, "only-notes-no-cues", "WEBVTT\n\nNOTE nothing was said\n", NONE),
    case(BLOCK, "text-block-without-timings-is-ignored", "WEBVTT\n\nstray text\n\n" + CUE, HI),
    case(
        BLOCK,
        "arrow-inside-cue-text-starts-a-new-block",
        "WEBVTT\n\n" + CUE + "this --> that\nlost\n\n00:03.000 --> 00:04.000\nb\n",
        [(1000, 2000, "hi"), (3000, 4000, "b")],
    ),
    case(
        BLOCK,
        "a-bad-timings-block-is-dropped-whole",
        "WEBVTT\n\n00:0x.000 --> 00:02.000\nlost\nlost too\n\n00:03.000 --> 00:04.000\nb\n",
        [(3000, 4000, "b")],
    ),
    case(BLOCK, "only-bad-cues-is-invalid", "WEBVTT\n\n00:01.00 --> 00:02.000\nhi\n", INVALID),
]
TIMINGS = "collect-webvtt-cue-timings-and-settings"


def timing(rule: str, line: str, expected: tuple[int, int] | None) -> object:
    """A cue whose timings line is `line`: the cue as timed, or no cue (invalid_captions)."""
    result: Expected = [(*expected, "hi")] if expected else INVALID
    return case(TIMINGS, rule, f"WEBVTT\n\n{line}\nhi\n", result)


TIMING_CASES = [
    timing("minutes-seconds", "00:01.000 --> 00:02.000", (1000, 2000)),
    timing("hours-minutes-seconds", "01:00:01.000 --> 01:00:02.000", (3_601_000, 3_602_000)),
    timing("one-digit-hours", "1:00:00.000 --> 1:00:01.000", (3_600_000, 3_601_000)),
    timing("three-digit-hours", "100:00:00.000 --> 100:00:01.000", (360_000_000, 360_001_000)),
    timing("no-spaces-around-arrow", "00:01.000-->00:02.000", (1000, 2000)),
    timing("tabs-around-arrow", "00:01.000\t-->\t00:02.000", (1000, 2000)),
    timing("form-feeds-are-whitespace", "\f00:01.000\f\f-->\f00:02.000\f", (1000, 2000)),
    timing("vertical-tab-is-no-whitespace", "\v00:01.000 --> 00:02.000", None),
    timing("vertical-tab-before-arrow", "00:01.000\v-->\v00:02.000", None),
    timing("vertical-tab-in-settings-is-kept", "00:01.000 --> 00:02.000 region:\v", (1000, 2000)),
    timing("leading-whitespace", "  00:01.000 --> 00:02.000", (1000, 2000)),
    timing("settings-after-end", "00:01.000 --> 00:02.000 align:start line:0", (1000, 2000)),
    timing("settings-glued-to-end", "00:01.000 --> 00:02.000align:start", (1000, 2000)),
    timing("second-arrow-is-a-setting", "00:01.000 --> 00:02.000 --> 00:03.000", (1000, 2000)),
    timing("invalid-settings-ignored", "00:01.000 --> 00:02.000 foo:bar line:x :", (1000, 2000)),
    timing("two-fraction-digits", "00:01.00 --> 00:02.000", None),
    timing("four-fraction-digits-end", "00:01.000 --> 00:02.0001", None),
    timing("one-fraction-digit", "00:01.0 --> 00:02.000", None),
    timing("no-fraction", "00:01 --> 00:02.000", None),
    timing("comma-fraction", "00:01,000 --> 00:02,000", None),
    timing("one-digit-minutes", "0:01.000 --> 0:02.000", None),
    timing("one-digit-seconds", "00:1.000 --> 00:2.000", None),
    # Each bad timestamp is either cue's only fault: were it read (60 minutes as an hour),
    # the cue would have end after start and be kept.
    timing("seconds-60", "00:60.000 --> 01:00.000", None),
    timing("seconds-60-end", "00:00.000 --> 00:60.000", None),
    timing("seconds-60-start", "00:60.000 --> 02:00.000", None),
    timing("seconds-60-with-hours-end", "00:00:00.000 --> 00:00:60.000", None),
    timing("seconds-99-with-hours-start", "00:00:99.000 --> 00:02:00.000", None),
    timing("minutes-60-with-hours", "00:60:00.000 --> 01:00:00.000", None),
    timing("minutes-60-with-hours-end", "00:00:00.000 --> 00:60:00.000", None),
    timing("minutes-60-with-hours-start", "00:60:00.000 --> 02:00:00.000", None),
    timing("minutes-99-with-hours-end", "01:00:00.000 --> 01:99:00.000", None),
    timing("minutes-and-seconds-59", "00:59:59.999 --> 01:59:59.999", (3_599_999, 7_199_999)),
    timing("seconds-59", "59:58.000 --> 59:59.999", (3_598_000, 3_599_999)),
    timing("first-field-over-59-means-hours", "60:00.000 --> 61:00.000", None),
    timing("three-digit-minutes", "000:01.000 --> 000:02.000", None),
    timing("letters-in-timestamp", "00:0x.000 --> 00:02.000", None),
    timing("negative-timestamp", "-00:01.000 --> 00:02.000", None),
    # No "-->" in the line: a text block, not a cue with bad timings.
    case(TIMINGS, "no-arrow-no-cue", "WEBVTT\n\n00:01.000 - -> 00:02.000\nhi\n", NONE),
    timing("no-end-time", "00:01.000 -->", None),
]
RESULT = "cue-timings-end-after-start"
DROPPED = [
    # The parser keeps such a cue; it is never shown, so it is no segment (invalid_cues).
    case(RESULT, "end-before-start", "WEBVTT\n\n00:02.000 --> 00:01.000\nhi\n", INVALID),
    case(RESULT, "end-equals-start", "WEBVTT\n\n00:01.000 --> 00:01.000\nhi\n", INVALID),
    case(RESULT, "empty-cue-text", "WEBVTT\n\n00:01.000 --> 00:02.000\n\n", INVALID),
]
TEXT = "webvtt-cue-text-tokenizer"


def text(rule: str, raw: str, expected: str) -> object:
    """A cue whose text is `raw`: the segment text it gives (or no cue when empty)."""
    result: Expected = [(1000, 2000, expected)] if expected else INVALID
    return case(TEXT, rule, f"WEBVTT\n\n00:01.000 --> 00:02.000\n{raw}\n", result)


TEXT_CASES = [
    text("class-bold-italic-underline", "<c.a.b>x</c> <b>y</b> <i>z</i> <u>w</u>", "x y z w"),
    text("voice-annotation-is-not-text", "<v Dr. Ada Byrne>Hello</v>", "Hello"),
    text("voice-with-class", "<v.loud Ada>Hello", "Hello"),
    text("language-span", "<lang en-GB>colour</lang>", "colour"),
    text("ruby-text-is-text", "<ruby>漢<rt>kan</rt>字<rt>ji</rt></ruby>", "漢kan字ji"),
    text("timestamp-tags", "one<00:01.500> two<00:00:01.800> three", "one two three"),
    text("unknown-tag-dropped-text-kept", "<blink>hi</blink>", "hi"),
    text("named-references", "&amp; &lt;tag&gt; &nbsp;x", "& <tag> x"),
    text("html-named-reference", "a &mdash; b &eacute;", "a — b é"),
    text("numeric-references", "&#65;&#x42;&#X43;", "ABC"),
    text("legacy-reference-without-semicolon", "fish &amp chips", "fish & chips"),
    text("unknown-reference-kept", "&bogus; &", "&bogus; &"),
    text("nul-reference-is-replacement", "a&#0;b", "a\ufffdb"),
    text("reference-split-by-tag-is-not-decoded", "&am<b>p;", "&amp;"),
    text("lone-less-than-opens-a-tag-to-the-end", "a < b", "a"),
    text("unclosed-tag-runs-across-lines", "one <b\ntwo", "one"),
    text("greater-than-is-text", "1 > 0", "1 > 0"),
    text("lines-joined-with-a-space", "line one\nline two", "line one line two"),
    text("nul-character-is-replacement", "a\x00b", "a\ufffdb"),
    text("lrm-and-rlm-references-kept", "abc &lrm;(1)&rlm; def", "abc \u200e(1)\u200f def"),
    text("arabic-letter-mark-kept", "\u061cمرحبا", "\u061cمرحبا"),
    text("embeddings-and-overrides-stripped", "\u202ba\u202c \u202db\u202c \u202ec", "a b c"),
    text("isolates-stripped", "\u2067x\u2069 \u2066y\u2069 \u2068z", "x y z"),
    text("zero-width-space-only-is-empty", "<b></b> &#8203;", ""),
]


def segments_of(body: str) -> Expected:
    """What parse_captions answers for a WebVTT body: segments, or the failure reason."""
    try:
        parsed = parse_captions(body, "webvtt")
    except CaptionError as error:
        return error.reason
    return [(s.start_ms, s.end_ms, s.text) for s in parsed.segments]


@pytest.mark.parametrize(
    ("body", "expected"), SIGNATURE + HEADER + BLOCKS + TIMING_CASES + DROPPED + TEXT_CASES
)
def test_spec_rule(body: str, expected: Expected) -> None:
    """published_captions answers the specification's result for this rule."""
    assert segments_of(body) == expected


class TestParser:
    """What the parser keeps besides cues: header, regions, stylesheets, settings."""

    def test_region_and_style_definitions(self) -> None:
        """REGION and STYLE blocks before the first cue are read; later ones are not."""
        parsed = parse_webvtt((FIXTURES / "regions.vtt").read_text(encoding="utf-8"))
        assert [r.id for r in parsed.regions] == ["fred", "bill"]
        assert parsed.regions[0].width == "40%" and parsed.regions[1].scroll == "up"
        assert parsed.stylesheets == [
            '::cue(v[voice="Fred"]) { color: cyan; }\n::cue(v[voice="Bill"]) { color: lime; }'
        ]
        assert parsed.header == ["Kind: captions", "Language: en"]
        assert [c.cue_settings.region for c in parsed.cues] == ["fred", "bill"] * 3
        assert parsed.dropped_cues == 0

    def test_region_settings_on_keyword_line_is_no_region(self) -> None:
        """ "REGION id:r" on one line is a text block: the keyword must be alone on its line."""
        assert parse_webvtt("WEBVTT\n\nREGION id:r\n\n" + CUE).regions == []

    def test_later_region_with_same_id_replaces(self) -> None:
        """A region defined twice keeps the later definition, in its place at the end."""
        body = "WEBVTT\n\nREGION\nid:a width:10%\n\nREGION\nid:b\n\nREGION\nid:a width:20%\n"
        assert [(r.id, r.width) for r in parse_webvtt(body).regions] == [
            ("b", None),
            ("a", "20%"),
        ]

    def test_cue_settings_last_valid_wins(self) -> None:
        """Settings: unknown and invalid ones are ignored, a later valid one wins."""
        cue = parse_webvtt("WEBVTT\n\n00:01.000 --> 00:02.000 align:start align:x line:0\nhi").cues[
            0
        ]
        assert (cue.cue_settings.align, cue.cue_settings.line) == ("start", "0")

    def test_identifier(self) -> None:
        """The line before the timings is the cue's identifier."""
        assert parse_webvtt("WEBVTT\n\nintro\n" + CUE).cues[0].identifier == "intro"

    def test_not_webvtt(self) -> None:
        """A failed signature raises NotWebVTT."""
        with pytest.raises(NotWebVTT):
            parse_webvtt("\nWEBVTT")

    def test_dropped_blocks_counted(self) -> None:
        """Blocks whose timings fail are counted; text blocks and notes are not."""
        body = "WEBVTT\n\nNOTE x\n\nstray\n\n00:01.00 --> 00:02.000\nhi\n\n" + CUE
        parsed = parse_webvtt(body)
        assert parsed.dropped_cues == 1 and len(parsed.cues) == 1

    @pytest.mark.parametrize(
        ("line", "expected"),
        [
            ("00:00.000 --> 00:00.001", (0, 1, "")),
            ("00:01.000 --> 00:02.000 region:r", (1000, 2000, "region:r")),
            ("1:02:03.004 --> 1:02:03.005", (3_723_004, 3_723_005, "")),
        ],
    )
    def test_timings(self, line: str, expected: tuple[int, int, str]) -> None:
        """Timings and the settings text after them."""
        assert parse_timings(line) == expected

    @pytest.mark.parametrize(
        "stamp",
        [
            "00:60:00.000",
            "01:60:00.000",
            "00:99:00.000",
            "00:00:60.000",
            "00:00:99.000",
            "00:60.000",
            "00:99.000",
        ],
    )
    def test_minutes_and_seconds_above_59(self, stamp: str) -> None:
        """Minutes and seconds are 00-59, with hours or without ("Collect a WebVTT timestamp")."""
        assert parse_timestamp(stamp, 0) is None

    @pytest.mark.parametrize(
        ("stamp", "millis"),
        [("00:59:59.999", 3_599_999), ("59:59.999", 3_599_999), ("60:00:00.000", 216_000_000)],
    )
    def test_59_is_the_last_minute_and_second(self, stamp: str, millis: int) -> None:
        """59 minutes and 59 seconds are read; a first field of 60 or more is hours."""
        assert parse_timestamp(stamp, 0) == (millis, len(stamp))

    def test_timings_60_file(self) -> None:
        """A file of cues each with one field at 60: only the cues with 60 hours are kept."""
        body = "WEBVTT\n\n" + "".join(
            f"{line}\ncue {n}\n\n"
            for n, line in enumerate(
                [
                    "00:00:60.000 --> 00:00:01.000",
                    "00:60:00.000 --> 00:00:01.000",
                    "00:00:00.000 --> 00:00:60.000",
                    "00:00:00.000 --> 00:60:00.000",
                    "00:00:00.000 --> 60:00:01.000",
                    "60:00:00.000 --> 60:00:01.000",
                ]
            )
        )
        parsed = parse_captions(body, "webvtt")
        assert [(s.start_ms, s.end_ms, s.text) for s in parsed.segments] == [
            (0, 216_001_000, "cue 4"),
            (216_000_000, 216_001_000, "cue 5"),
        ]
        assert parsed.invalid_cues == 4

    def test_timestamp_position(self) -> None:
        """A timestamp is read from a position and returns where it ended."""
        assert parse_timestamp("x 00:01.500 y", 2) == (1500, 11)

    def test_cue_text_keeps_line_feeds(self) -> None:
        """The cue text keeps its line feeds; tags go, references are decoded."""
        assert cue_text("<i>a</i>\n&amp;b") == "a\n&b"


class TestControlCharacters:
    """Form feed and vertical tab, as web-platform-tests' whitespace-chars and regions-id
    cases hold them (files of our own with the same shapes)."""

    def test_whitespace_around_timings(self) -> None:
        """Spaces, tabs and form feeds are whitespace around timings; VT is not, so that
        block is dropped whole, and counted."""
        parsed = parse_webvtt((FIXTURES / "whitespace_controls.vtt").read_text(encoding="utf-8"))
        assert [(c.identifier, c.start_ms, c.end_ms, c.text) for c in parsed.cues] == [
            ("padded with spaces", 1_000, 2_500, "  The tide comes in."),
            ("padded with tabs", 3_000, 4_500, "The tide goes out."),
            ("padded with form feeds", 5_000, 6_500, "Gulls follow the boats."),
        ]
        assert parsed.dropped_cues == 1

    def test_vertical_tab_region_id(self) -> None:
        """Region settings split on ASCII whitespace, which VT is not: "id:\\v" names a
        region "\\v" and "region:\\v" places a cue in it; the last id of a region wins and
        "id:" or ":x" alone is no setting."""
        parsed = parse_webvtt((FIXTURES / "region_ids_vt.vtt").read_text(encoding="utf-8"))
        lines = {r.id: r.lines for r in parsed.regions}
        assert lines == {"right": "1", "left": "2", "centre": "3", "\v": "4"}
        placed = [lines[c.cue_settings.region] for c in parsed.cues]
        assert placed == ["2", "1", "3", "4"]


def test_regions_fixture_keeps_every_cue() -> None:
    """A broadcast file with REGION and STYLE blocks keeps all six cues, in their regions."""
    parsed = parse_captions((FIXTURES / "regions.vtt").read_text(encoding="utf-8"), "webvtt")
    assert [(s.start_ms, s.end_ms) for s in parsed.segments] == [
        (0, 20_000),
        (2_500, 22_500),
        (5_000, 25_000),
        (7_500, 27_500),
        (10_000, 30_000),
        (12_500, 32_500),
    ]
    assert parsed.segments[5].text == "OK, let’s go."
    assert "color" not in parsed.text and "id:" not in parsed.text
    assert parsed.language == "en" and parsed.reasons == []
