"""Caption parsing: sniffing, tags and entities, dropped cues, rolling repeats, bounds."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import hostile
from tests.support.schemas import validate_result
from tests.support.tls_site import TLSSite
from worker.content.captions import (
    MAX_RAW_CUES,
    CaptionError,
    collapse_rolling,
    parse_captions,
    sniff_format,
    whole_ms,
)
from worker.content.results import MAX_SEGMENTS, Segment
from worker.domain.reasons import Reason
from worker.fetch.fetcher import Fetcher
from worker.retrieval.pipeline import run_pipeline

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "captions"
STYLED = """WEBVTT
Kind: captions
Language: en-GB

STYLE
::cue(.yellow) { color: yellow; }

NOTE a comment --- not a cue

intro
00:00:01.000 --> 00:00:03.500 align:start position:10%
<v Dr. Ada>Welcome &amp; hello, <b>everyone</b></v>

00:00:04.000 --> 00:00:06.000
<c.yellow>Rivers</c> carry <i>silt</i> &lt;and&gt; stones&nbsp;too

00:00:06.500 --> 00:00:08.000
<00:00:06.500><c>word</c><00:00:07.000><c> by</c><00:00:07.500><c> word</c>
"""


def vtt(*cues: tuple[str, str]) -> str:
    """A WebVTT file from (timing, text) pairs."""
    return "WEBVTT\n\n" + "\n\n".join(f"{t}\n{x}" for t, x in cues) + "\n"


class TestSniffFormat:
    """WebVTT vs SubRip by content, type and extension."""

    def test_webvtt_header(self) -> None:
        """A WEBVTT header (after a BOM and blank lines) is WebVTT."""
        assert sniff_format("\ufeff\n\nWEBVTT - title\n\n") == "webvtt"

    def test_srt_by_index_and_comma_timing(self) -> None:
        """An index line then a comma timing line is SubRip, even with CRLF."""
        assert sniff_format("1\r\n00:00:01,000 --> 00:00:02,000\r\nHi\r\n") == "subrip"

    def test_srt_comma_timing_without_index(self) -> None:
        """Comma timings anywhere near the start are SubRip."""
        assert sniff_format("\n00:00:01,000 --> 00:00:02,000\nHi") == "subrip"

    def test_headerless_dot_timing_is_webvtt(self) -> None:
        """Dot timings without a header are read as WebVTT."""
        assert sniff_format("00:01.000 --> 00:02.000\nHi") == "webvtt"

    def test_by_mime_type_and_extension(self) -> None:
        """With no telling content, the media type or URL extension decides."""
        assert sniff_format("junk", "text/vtt") == "webvtt"
        assert sniff_format("junk", "application/x-subrip") == "subrip"
        assert sniff_format("junk", "text/plain", "https://a.example/c/en.SRT?v=2") == "subrip"
        assert sniff_format("junk", None, "https://a.example/c/en.vtt#t") == "webvtt"

    def test_plain_text_is_not_captions(self) -> None:
        """Ordinary text with no caption signal is not captions."""
        assert sniff_format("Dear diary, today --> tomorrow.", "text/plain") is None


class TestParseWebVTT:
    """WebVTT files with styling, voices, entities and timestamps."""

    def test_tags_and_entities_removed(self) -> None:
        """Voice, class, bold, italic and timestamp tags go; entities are decoded."""
        parsed = parse_captions(STYLED, "webvtt")
        assert [s.text for s in parsed.segments] == [
            "Welcome & hello, everyone",
            "Rivers carry silt <and> stones too",
            "word by word",
        ]
        assert parsed.segments[0] == Segment(1000, 3500, "Welcome & hello, everyone")
        assert parsed.invalid_cues == 0 and parsed.reasons == []

    def test_language_header(self) -> None:
        """The `Language:` header is the declared language, over the track's srclang."""
        assert parse_captions(STYLED, "webvtt", "fr").language == "en-GB"

    def test_declared_language_used_without_header(self) -> None:
        """Without a header the srclang given is the language; with neither, None."""
        body = vtt(("00:01.000 --> 00:02.000", "Hi"))
        assert parse_captions(body, "webvtt", "de").language == "de"
        assert parse_captions(body, "webvtt").language is None

    def test_text_is_joined_cue_text(self) -> None:
        """`text` joins the segments one per line."""
        assert parse_captions(STYLED, "webvtt").text.splitlines()[1].startswith("Rivers carry")

    def test_bom_and_crlf(self) -> None:
        """A BOM and CRLF line endings parse."""
        body = "\ufeffWEBVTT\r\n\r\n00:00:01.000 --> 00:00:02.000\r\nLine one\r\nLine two\r\n"
        parsed = parse_captions(body, "webvtt")
        assert parsed.segments == [Segment(1000, 2000, "Line one Line two")]

    def test_hour_less_and_long_timestamps(self) -> None:
        """mm:ss.ttt and hours beyond 99 convert to milliseconds."""
        body = vtt(("01:02.500 --> 01:03.000", "a"), ("100:00:00.000 --> 100:00:01.000", "b"))
        segments = parse_captions(body, "webvtt").segments
        assert segments[0] == Segment(62_500, 63_000, "a")
        assert segments[1].start_ms == 360_000_000

    def test_overlapping_cues_kept(self) -> None:
        """Overlapping cues (two speakers) are both kept."""
        body = vtt(("00:01.000 --> 00:05.000", "Alice talks"), ("00:02.000 --> 00:03.000", "Bob"))
        assert len(parse_captions(body, "webvtt").segments) == 2

    def test_dropped_cues_are_counted(self) -> None:
        """Backwards, zero-length, empty and unparsable-timing cues count as invalid."""
        body = vtt(
            ("00:01.000 --> 00:02.000", "good"),
            ("00:05.000 --> 00:04.000", "backwards"),
            ("00:06.000 --> 00:06.000", "zero length"),
            ("00:07.000 --> 00:08.000", "<b></b> &#8203;"),
            ("00:0x.000 --> 00:09.000", "broken timing"),
            ("00:10.000 --> 00:11.000", "also good"),
        )
        parsed = parse_captions(body, "webvtt")
        assert [s.text for s in parsed.segments] == ["good", "also good"]
        assert parsed.invalid_cues == 4
        assert parsed.reasons == [Reason.INVALID_CUES]

    def test_missing_blank_line_between_cues(self) -> None:
        """Two cues without a blank line between them both parse."""
        body = "WEBVTT\n\n00:01.000 --> 00:02.000\nfirst\n00:03.000 --> 00:04.000\nsecond\n"
        assert [s.text for s in parse_captions(body, "webvtt").segments] == ["first", "second"]

    def test_headerless_webvtt_is_invalid(self) -> None:
        """Cue timings without the WEBVTT signature are not WebVTT (the specification)."""
        with pytest.raises(CaptionError) as caught:
            parse_captions("00:01.000 --> 00:02.000\nhi\n", "webvtt")
        assert caught.value.reason == Reason.INVALID_CAPTIONS


class TestParseSubRip:
    """SubRip files."""

    SRT = (
        "1\r\n00:00:01,000 --> 00:00:02,500\r\n<i>Hello</i> <font color=red>there</font>\r\n\r\n"
        "2\r\n00:00:03,000 --> 00:00:04,000\r\nTom &amp; Jerry\r\n\r\n"
        "3\r\n00:00:05,000 --> 00:00:04,000\r\nbackwards\r\n"
    )

    def test_segments(self) -> None:
        """Cues parse with tags stripped and entities decoded; the backwards one is dropped."""
        parsed = parse_captions(self.SRT, "subrip")
        assert parsed.caption_format == "subrip"
        assert parsed.segments == [
            Segment(1000, 2500, "Hello there"),
            Segment(3000, 4000, "Tom & Jerry"),
        ]
        assert parsed.invalid_cues == 1

    def test_srt_without_indexes_falls_back(self) -> None:
        """An SRT without index lines still parses."""
        body = "00:00:01,000 --> 00:00:02,000\nNo index\n\n00:00:03,000 --> 00:00:04,000\nTwo\n"
        assert [s.text for s in parse_captions(body, "subrip").segments] == ["No index", "Two"]

    def test_broken_timing_line_does_not_leak_into_text(self) -> None:
        """A malformed timing line is counted as dropped and not shown as caption text."""
        body = "1\n00:00:01,000 --> 00:00:02,000\nfine\n\n2\n00:00:0x,000 --> 00:00:04,000\nbad\n"
        parsed = parse_captions(body, "subrip")
        assert "-->" not in parsed.text
        assert parsed.invalid_cues == 1


class TestFailures:
    """Unparsable and empty files."""

    @pytest.mark.parametrize(
        ("body", "fmt"),
        [
            ("WEBVTT\n\nNOTE only notes\n", "webvtt"),
            ("WEBVTT", "webvtt"),
            ("", "subrip"),
            ("\ufeff\r\n\r\n", "subrip"),
        ],
    )
    def test_no_cue_is_no_captions(self, body: str, fmt: str) -> None:
        """A WebVTT file without any cue, or a blank SubRip file, is no_captions."""
        with pytest.raises(CaptionError) as caught:
            parse_captions(body, fmt)  # type: ignore[arg-type]
        assert caught.value.reason == Reason.NO_CAPTIONS

    @pytest.mark.parametrize(
        ("body", "fmt"),
        [
            ("This is just prose, not captions.", "webvtt"),
            ("This is just prose, not captions.", "subrip"),
            ("", "webvtt"),
            ("\ufeff", "webvtt"),
            ("\r\n\r\n", "webvtt"),
            ("WEBVTT\n\nnonsense --> more nonsense\ntext\n", "webvtt"),
            ("1\n00:00:05,000 --> 00:00:01,000\nonly a backwards cue\n", "subrip"),
        ],
    )
    def test_unparsable_is_invalid_captions(self, body: str, fmt: str) -> None:
        """Prose, or timings that never yield a valid cue, is invalid_captions."""
        with pytest.raises(CaptionError) as caught:
            parse_captions(body, fmt)  # type: ignore[arg-type]
        assert caught.value.reason == Reason.INVALID_CAPTIONS


class TestRollingCaptions:
    """YouTube-style rolling auto-captions: segments as cued, joined text without repeats."""

    ROLLING = (FIXTURES / "rolling_auto.vtt").read_text(encoding="utf-8")

    def test_text_has_no_repeats(self) -> None:
        """Each spoken word appears once in `text`."""
        parsed = parse_captions(self.ROLLING, "webvtt")
        assert parsed.text == "hello everyone welcome\nto the channel\ntoday we talk about rivers"

    def test_segments_keep_each_cue(self) -> None:
        """Every cue is a segment with its own text and timing, repeats and all."""
        parsed = parse_captions(self.ROLLING, "webvtt")
        assert parsed.segments == [
            Segment(0, 2340, "hello everyone welcome"),
            Segment(2340, 2350, "hello everyone welcome"),
            Segment(2350, 5000, "hello everyone welcome to the channel"),
            Segment(5000, 5010, "to the channel"),
            Segment(5010, 7000, "to the channel today we talk about rivers"),
        ]
        assert parsed.invalid_cues == 0

    def test_segment_text_is_not_trimmed(self) -> None:
        """A cue repeating the end of the one before keeps its words; only `text` drops them."""
        body = vtt(
            ("00:01.000 --> 00:02.000", "so we said yeah"),
            ("00:02.000 --> 00:03.000", "yeah what"),
            ("00:03.000 --> 00:04.000", "the quick brown fox"),
            ("00:04.000 --> 00:05.000", "quick brown fox jumps"),
        )
        parsed = parse_captions(body, "webvtt")
        assert [s.text for s in parsed.segments] == [
            "so we said yeah",
            "yeah what",
            "the quick brown fox",
            "quick brown fox jumps",
        ]
        assert parsed.text == "so we said yeah\nyeah what\nthe quick brown fox\njumps"

    def test_identical_cues_stay_apart(self) -> None:
        """Two cues with the same text are two segments, each with its own end; text once."""
        body = vtt(
            ("00:00.000 --> 00:01.000", "Hello there"), ("00:01.000 --> 00:03.000", "Hello there")
        )
        parsed = parse_captions(body, "webvtt")
        assert parsed.segments == [
            Segment(0, 1000, "Hello there"),
            Segment(1000, 3000, "Hello there"),
        ]
        assert parsed.text == "Hello there"

    def test_word_level_overlap(self) -> None:
        """A cue repeating the last three or more words of the previous one loses them."""
        cues = [["the quick brown fox"], ["quick brown fox jumps over"]]
        assert collapse_rolling(cues) == ["the quick brown fox", "jumps over"]

    def test_single_shared_word_is_not_a_repeat(self) -> None:
        """Ordinary captions sharing one word at the seam keep both words."""
        assert collapse_rolling([["I said no"], ["no means no"]]) == ["I said no", "no means no"]


class TestSubRipFixture:
    """A SubRip file with the shapes that lost a cue part-way through before."""

    SRT = (FIXTURES / "subrip_lost_cue.srt").read_text(encoding="utf-8")

    def test_every_cue_kept_in_place(self) -> None:
        """Blank line inside a cue, a repeated cue, a number line, a missing blank line: no
        cue is lost or merged, so no later segment shifts; the empty cue is counted."""
        parsed = parse_captions(self.SRT, "subrip")
        assert parsed.segments == [
            Segment(1000, 2000, "The lighthouse keeper"),
            Segment(2500, 4000, "lived alone still lived alone"),
            Segment(4500, 5500, "♪"),
            Segment(6000, 7000, "♪"),
            Segment(7500, 9000, "from 1984 1985"),
            Segment(9500, 10500, "until the storm."),
            Segment(12500, 14000, "The end."),
        ]
        assert parsed.invalid_cues == 1 and parsed.reasons == [Reason.INVALID_CUES]

    def test_bidi_marks_kept_controls_stripped(self) -> None:
        """SubRip text keeps LRM/RLM and loses embeddings and isolates, as WebVTT does."""
        body = "1\n00:00:01,000 --> 00:00:02,000\n\u202bשלום\u202c (1)\u200f\n\u2067x\u2069\n"
        assert parse_captions(body, "subrip").segments[0].text == "שלום (1)\u200f x"


class TestBounds:
    """Cue and text bounds."""

    def test_more_than_max_segments(self) -> None:
        """More than 1 000 cues keep the first 1 000 and say cues_limited."""
        cues = [
            (f"{i // 60:02d}:{i % 60:02d}.000 --> {i // 60:02d}:{i % 60:02d}.500", f"cue {i}")
            for i in range(1_200)
        ]
        parsed = parse_captions(vtt(*cues), "webvtt")
        assert len(parsed.segments) == MAX_SEGMENTS
        assert parsed.segments[-1].text == "cue 999"
        assert parsed.reasons == [Reason.CUES_LIMITED]
        assert parsed.text.splitlines()[-1] == "cue 999"

    def test_raw_cue_bound_before_parsing(self) -> None:
        """Timing lines past the raw bound are cut before parsing and not counted invalid."""
        n = MAX_RAW_CUES + 500
        cues = [
            (
                f"{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000 --> "
                f"{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.900",
                f"c{i}",
            )
            for i in range(n)
        ]
        parsed = parse_captions(vtt(*cues), "webvtt")
        assert parsed.limited and parsed.invalid_cues == 0
        assert Reason.CUES_LIMITED in parsed.reasons


#: Files with the control characters of web-platform-tests' whitespace-chars and regions-id
#: cases: form feeds and vertical tabs in timings lines, a vertical tab as a region id.
CONTROL_FILES = ("whitespace_controls.vtt", "region_ids_vt.vtt")


@pytest.fixture(scope="module")
def caption_site() -> Iterator[TLSSite]:
    """The control-character files over loopback HTTPS, as text/vtt and with no type."""
    with TLSSite() as site:
        for name in CONTROL_FILES:
            body = (FIXTURES / name).read_bytes()
            site.page(f"/vtt/{name}", body, "text/vtt; charset=utf-8")
            site.page(f"/untyped/{name}", body, "")
            site.page(f"/plain/{name}", body, "text/plain")
        yield site


@pytest.fixture(scope="module")
def caption_fetcher(
    caption_site: TLSSite, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fetcher]:
    ca = caption_site.write_ca(tmp_path_factory.mktemp("captions-ca") / "ca.pem")
    client = Fetcher(hostile.fetch_settings([caption_site.port], ca_bundle=ca))  # type: ignore[arg-type]
    yield client
    client.close()


def fetched(fetcher: Fetcher, url: str) -> dict[str, Any]:
    """published_captions of `url` through the real fetcher, checked against the schema."""
    at = datetime(2024, 5, 1, tzinfo=UTC)
    run = run_pipeline(fetcher, url, "published_captions", None, now=lambda: at)
    return validate_result(run.result)  # type: ignore[arg-type]


class TestControlCharactersOverHTTPS:
    """Form feed and vertical tab are text to the WebVTT parser: such files are read, not
    refused as binary (the regression: unsupported/unsupported_media)."""

    @pytest.mark.parametrize("folder", ["vtt", "untyped"])
    def test_whitespace_controls(
        self, caption_fetcher: Fetcher, caption_site: TLSSite, folder: str
    ) -> None:
        """Spaces, tabs and form feeds around the arrow are whitespace; the block whose
        timings hold vertical tabs is dropped by the parser and counted (partial)."""
        result = fetched(caption_fetcher, caption_site.url(f"/{folder}/whitespace_controls.vtt"))
        assert (result["status"], result["reason"]) == ("partial", "invalid_cues")
        assert result["segments"] == [
            {"start_ms": 1_000, "end_ms": 2_500, "text": "The tide comes in."},
            {"start_ms": 3_000, "end_ms": 4_500, "text": "The tide goes out."},
            {"start_ms": 5_000, "end_ms": 6_500, "text": "Gulls follow the boats."},
        ]
        assert result["provenance"]["caption_format"] == "webvtt"

    @pytest.mark.parametrize("folder", ["vtt", "untyped"])
    def test_vertical_tab_region_id(
        self, caption_fetcher: Fetcher, caption_site: TLSSite, folder: str
    ) -> None:
        """A vertical tab as a region id and as a cue's region setting: every cue is kept."""
        result = fetched(caption_fetcher, caption_site.url(f"/{folder}/region_ids_vt.vtt"))
        assert result["status"] == "ready"
        assert [(s["start_ms"], s["end_ms"], s["text"]) for s in result["segments"]] == [
            (1_000, 2_000, "North bank."),
            (2_000, 3_000, "South bank."),
            (3_000, 4_000, "Mid-stream."),
            (4_000, 5_000, "Under the bridge."),
        ]

    @pytest.mark.parametrize("name", CONTROL_FILES)
    def test_vertical_tab_is_binary_as_plain_text(
        self, caption_fetcher: Fetcher, caption_site: TLSSite, name: str
    ) -> None:
        """Served as text/plain the MIME Sniffing rule holds: VT is a binary data byte."""
        result = fetched(caption_fetcher, caption_site.url(f"/plain/{name}"))
        assert (result["status"], result["reason"]) == ("unsupported", "unsupported_media")


#: A caption time as (hours, minutes, seconds, milliseconds).
Clock = tuple[int, int, int, int]
CLOCKS = st.tuples(st.integers(0, 99), st.integers(0, 59), st.integers(0, 59), st.integers(0, 999))
#: Hypothesis without its per-example deadline (no timed assertions), the same examples each run.
EXACT = settings(max_examples=300, deadline=None, derandomize=True)


def exact_ms(clock: Clock) -> int:
    hours, minutes, seconds, millis = clock
    return ((hours * 60 + minutes) * 60 + seconds) * 1_000 + millis


class TestExactMilliseconds:
    """Caption times convert to milliseconds exactly, with integers: no float truncation
    (the regression: SubRip 00:34:34,519 read as 2 074 518 ms)."""

    def test_the_reported_subrip_time(self) -> None:
        body = "1\n00:34:34,519 --> 00:34:35,001\nThe ferry leaves.\n"
        assert parse_captions(body, "subrip").segments == [
            Segment(2_074_519, 2_075_001, "The ferry leaves.")
        ]

    def test_every_millisecond_of_the_reported_minute(self) -> None:
        """Every h:m:s,ms of 00:34 (60 000 times, many of which float arithmetic cuts)."""
        wrong = [
            (second, millis)
            for second in range(60)
            for millis in range(1_000)
            if whole_ms(timedelta(minutes=34, seconds=second, milliseconds=millis))
            != exact_ms((0, 34, second, millis))
        ]
        assert wrong == []

    @EXACT
    @given(st.lists(st.tuples(CLOCKS, CLOCKS), min_size=1, max_size=40))
    def test_subrip_times(self, pairs: list[tuple[Clock, Clock]]) -> None:
        """A SubRip file of cues at any h:m:s,ms: each segment's times are exact."""
        cues = [(start, end) for start, end in pairs if exact_ms(end) > exact_ms(start)]
        if not cues:
            return
        body = "".join(
            f"{n}\n{srt_time(start)} --> {srt_time(end)}\ncue {n}\n\n"
            for n, (start, end) in enumerate(cues, 1)
        )
        segments = parse_captions(body, "subrip").segments
        assert [(s.start_ms, s.end_ms) for s in segments] == [
            (exact_ms(start), exact_ms(end)) for start, end in cues
        ]

    @EXACT
    @given(st.lists(st.tuples(CLOCKS, CLOCKS), min_size=1, max_size=40))
    def test_webvtt_times(self, pairs: list[tuple[Clock, Clock]]) -> None:
        """A WebVTT file of cues at any [hh:]mm:ss.ttt: each segment's times are exact."""
        cues = [(start, end) for start, end in pairs if exact_ms(end) > exact_ms(start)]
        if not cues:
            return
        body = vtt(
            *(
                (f"{vtt_time(start)} --> {vtt_time(end)}", f"cue {n}")
                for n, (start, end) in enumerate(cues)
            )
        )
        segments = parse_captions(body, "webvtt").segments
        assert [(s.start_ms, s.end_ms) for s in segments] == [
            (exact_ms(start), exact_ms(end)) for start, end in cues
        ]


def srt_time(clock: Clock) -> str:
    hours, minutes, seconds, millis = clock
    return f"{hours:02d}:{minutes:02d}:{seconds:02d},{millis:03d}"


def vtt_time(clock: Clock) -> str:
    """Without hours when they are 0 and the minutes allow it (both forms get read)."""
    hours, minutes, seconds, millis = clock
    if hours == 0 and millis % 2:
        return f"{minutes:02d}:{seconds:02d}.{millis:03d}"
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}.{millis:03d}"
