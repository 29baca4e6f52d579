"""Caption files (WebVTT, SubRip): sniff, parse to each format's rules, count dropped cues.

WebVTT is read as the W3C specification's parser reads it (`worker.content.webvtt_spec`),
SubRip as the `srt` library reads it. Segments are the cues as they are; only the joined
`text` drops the words rolling auto-captions repeat from one cue to the next.
"""

import html
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

import srt

from worker.content.results import MAX_SEGMENTS, MAX_TEXT_CHARS, Segment
from worker.content.text import BIDI_MARKS, clean_text
from worker.content.webvtt_spec import NotWebVTT, cue_text, parse_webvtt, preprocess
from worker.domain.languages import normalise_tag
from worker.domain.reasons import Reason

CaptionFormat = Literal["webvtt", "subrip"]

#: Timing lines read at most; later ones are cut before parsing (cues_limited).
MAX_RAW_CUES = 5 * MAX_SEGMENTS
#: Fewest shared words for a word-level rolling repeat to be collapsed.
MIN_OVERLAP_WORDS = 3
#: How far into a file the format is sniffed, in characters.
SNIFF_CHARS = 4_096

VTT_MIME_TYPES = frozenset({"text/vtt"})
SRT_MIME_TYPES = frozenset({"application/x-subrip", "application/srt", "text/srt"})
_VTT_HEADER = re.compile(r"^WEBVTT(?:[ \t]|$)", re.M)
_SRT_START = re.compile(r"^\d+[ \t]*\n[ \t]*\d+:\d{1,2}:\d{1,2}[,.]\d+[ \t]*-->")
_COMMA_TIMING = re.compile(r"^[ \t]*(?:\d+:)?\d{1,2}:\d{1,2},\d+[ \t]*-->", re.M)
_DOT_TIMING = re.compile(r"^[ \t]*(?:\d+:)?\d{1,2}:\d{1,2}\.\d+[ \t]*-->", re.M)
#: A SubRip timing line, well formed or not: a digit first, an arrow after (for counting).
_SRT_TIMING_LINE = re.compile(r"^[ \t]*\d[^\n]*-->", re.M)
#: SubRip markup players do not show: HTML-like tags and ASS override blocks ({\an8}).
_SRT_MARKUP = re.compile(r"<[^>\n]*>|\{\\[^}\n]*\}")
_MILLISECOND = timedelta(milliseconds=1)


class CaptionError(Exception):
    """A caption file with nothing usable: `reason` is invalid_captions or no_captions."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason.value)
        self.reason = reason


@dataclass
class ParsedCaptions:
    """Segments of a caption file, their joined text and what was dropped or cut on the way."""

    caption_format: CaptionFormat
    segments: list[Segment]
    #: The segments' text one per line, rolling repeats dropped (`collapse_rolling`).
    text: str
    language: str | None = None
    invalid_cues: int = 0
    limited: bool = False
    reasons: list[Reason] = field(default_factory=list)


@dataclass(frozen=True)
class RawCue:
    """A cue as read, before cleaning: timing in milliseconds and its text (lines)."""

    start_ms: int
    end_ms: int
    text: str


def normalise_newlines(text: str) -> str:
    """Drop a leading BOM and turn CRLF/CR into LF."""
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def sniff_format(
    text: str, mime_type: str | None = None, url: str | None = None
) -> CaptionFormat | None:
    """Return the caption format of `text` (content first, then type and extension), or None.

    This only picks the reader: a file sniffed as WebVTT whose signature is not exactly as the
    specification says is then refused by the reader (invalid_captions).
    """
    head = normalise_newlines(text)[:SNIFF_CHARS].lstrip()
    if head.startswith("WEBVTT") and _VTT_HEADER.match(head):
        return "webvtt"
    if _SRT_START.match(head) or _COMMA_TIMING.search(head):
        return "subrip"
    if _DOT_TIMING.search(head):
        return "webvtt"
    path = (url or "").split("?", 1)[0].split("#", 1)[0].lower()
    if mime_type in VTT_MIME_TYPES or path.endswith(".vtt"):
        return "webvtt"
    if mime_type in SRT_MIME_TYPES or path.endswith(".srt"):
        return "subrip"
    return None


def _bound_cues(text: str) -> tuple[str, int, bool]:
    """Cut `text` before its (MAX_RAW_CUES+1)-th timing line; return it, its timing lines, cut."""
    count = 0
    offset = 0
    for line in text.split("\n"):
        if "-->" in line:
            count += 1
            if count > MAX_RAW_CUES:
                return text[:offset], MAX_RAW_CUES, True
        offset += len(line) + 1
    return text, count, False


def cue_lines(text: str) -> list[str]:
    """A cue's text as clean, non-blank lines; the bidi marks (LRM, RLM, ALM) are kept."""
    lines = []
    for line in text.split("\n"):
        cleaned = " ".join(clean_text(line, keep=BIDI_MARKS).split())
        if cleaned:
            lines.append(cleaned)
    return lines


def read_webvtt(text: str) -> tuple[list[RawCue], list[str], int]:
    """Cues, header lines and dropped cue blocks of a preprocessed WebVTT file, or
    CaptionError(invalid_captions) when the specification says it is not WebVTT."""
    try:
        parsed = parse_webvtt(text, preprocessed=True)
    except NotWebVTT as exc:
        raise CaptionError(Reason.INVALID_CAPTIONS) from exc
    cues = [RawCue(c.start_ms, c.end_ms, cue_text(c.text)) for c in parsed.cues]
    return cues, parsed.header, parsed.dropped_cues


def whole_ms(delta: timedelta) -> int:
    """`delta` in whole milliseconds, exactly (floor): timedelta's integer arithmetic.

    Not `int(delta.total_seconds() * 1000)`: the float product for 2 074.519 s is
    2074518.9999999998, which int() cuts to 2 074 518.
    """
    return delta // _MILLISECOND


def read_subrip(text: str) -> tuple[list[RawCue], int]:
    """Cues of a SubRip file (LF newlines) as `srt` reads them; the timing lines it skipped.

    Markup players do not show (<i>, <font>, {\\an8}) goes; entities are decoded, as the
    players that render SubRip's HTML-like tags do.
    """
    subtitles = list(srt.parse(text, ignore_errors=True))
    if not subtitles and text.strip():
        raise CaptionError(Reason.INVALID_CAPTIONS)
    cues = [
        RawCue(
            whole_ms(sub.start),
            whole_ms(sub.end),
            html.unescape(_SRT_MARKUP.sub("", sub.content)),
        )
        for sub in subtitles
    ]
    skipped = len(_SRT_TIMING_LINE.findall(text)) - len(subtitles)
    return cues, max(0, skipped)


def _header_language(metadata: list[str]) -> str | None:
    for line in metadata:
        name, _, value = line.partition(":")
        if name.strip().lower() in ("language", "lang", "srclang"):
            return normalise_tag(value.strip())
    return None


def _overlap(previous: list[str], current: list[str]) -> int:
    """How many leading words of `current` repeat the end of `previous` (rolling captions)."""
    if previous and previous == current:
        return len(current)
    for k in range(min(len(previous), len(current)), 0, -1):
        if previous[-k:] == current[:k]:
            whole = k in (len(previous), len(current))
            return k if k >= MIN_OVERLAP_WORDS or (whole and k >= 2) else 0
    return 0


def _line_overlap(previous: list[str], current: list[str]) -> int:
    """How many leading lines of `current` repeat the last lines of `previous`."""
    for k in range(min(len(previous), len(current)), 0, -1):
        if previous[-k:] == current[:k]:
            return k
    return 0


def collapse_rolling(cues: list[list[str]]) -> list[str]:
    """The joined text's lines: each cue's lines less the words it repeats from the one before.

    Rolling auto-captions show each line twice (bottom, then top) and repeat words at the
    seam; the text says them once. Segments are not collapsed: they keep every cue as it is.
    """
    out: list[str] = []
    previous: list[str] = []
    for lines in cues:
        shared = _line_overlap(previous, lines)
        words = " ".join(lines[shared:]).split()
        if not shared:
            words = words[_overlap(" ".join(previous).split(), words) :]
        previous = lines
        if words:
            out.append(" ".join(words))
    return out


def parse_captions(
    text: str, caption_format: CaptionFormat, declared_language: str | None = None
) -> ParsedCaptions:
    """Parse a caption file; raise CaptionError when it is not one or has no cue to show.

    Cues that would never show (end not after start) or show nothing are dropped and counted
    with those the reader dropped (invalid_cues).
    """
    # Cut on the text each reader sees: WebVTT keeps a second BOM, which is not a signature.
    read = preprocess(text) if caption_format == "webvtt" else normalise_newlines(text)
    bounded, _, limited = _bound_cues(read)
    metadata: list[str] = []
    if caption_format == "webvtt":
        raw, metadata, dropped = read_webvtt(bounded)
    else:
        raw, dropped = read_subrip(bounded)
    kept: list[tuple[RawCue, list[str]]] = []
    for cue in raw:
        lines = cue_lines(cue.text)
        if cue.end_ms <= cue.start_ms or cue.start_ms < 0 or not lines:
            dropped += 1
            continue
        kept.append((cue, lines))
    if not kept:
        raise CaptionError(Reason.INVALID_CAPTIONS if dropped else Reason.NO_CAPTIONS)
    reasons: list[Reason] = []
    if len(kept) > MAX_SEGMENTS or limited:
        kept, limited = kept[:MAX_SEGMENTS], True
        reasons.append(Reason.CUES_LIMITED)
    if dropped:
        reasons.append(Reason.INVALID_CUES)
    segments = [Segment(c.start_ms, c.end_ms, " ".join(ls)[:MAX_TEXT_CHARS]) for c, ls in kept]
    joined = "\n".join(line[:MAX_TEXT_CHARS] for line in collapse_rolling([ls for _, ls in kept]))
    language = _header_language(metadata) or normalise_tag(declared_language)
    return ParsedCaptions(caption_format, segments, joined, language, dropped, limited, reasons)
