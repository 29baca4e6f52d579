"""Caption files (WebVTT, SubRip): sniff, parse with webvtt-py, count dropped cues, collapse."""

import html
import io
import re
from dataclasses import dataclass, field
from typing import Literal

import webvtt
from webvtt.errors import MalformedCaptionError, MalformedFileError

from worker.content.results import MAX_SEGMENTS, MAX_TEXT_CHARS, Segment
from worker.content.text import clean_text
from worker.languages import normalise_tag
from worker.reasons import Reason

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
_COMMA_MS = re.compile(r"(\d{1,2}:\d{1,2}),(\d+)")
_TAG = re.compile(r"<[^>\n]*>")


class CaptionError(Exception):
    """A caption file with nothing usable: `reason` is invalid_captions or no_captions."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason.value)
        self.reason = reason


@dataclass
class ParsedCaptions:
    """Segments of a caption file and what was dropped or cut on the way."""

    caption_format: CaptionFormat
    segments: list[Segment]
    language: str | None = None
    invalid_cues: int = 0
    limited: bool = False
    reasons: list[Reason] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The segments' text joined, one cue per line."""
        return "\n".join(segment.text for segment in self.segments)


def normalise_newlines(text: str) -> str:
    """Drop a leading BOM and turn CRLF/CR into LF."""
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def sniff_format(
    text: str, mime_type: str | None = None, url: str | None = None
) -> CaptionFormat | None:
    """Return the caption format of `text` (content first, then type and extension), or None."""
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


def _cue_lines(raw: str) -> list[str]:
    """Cue payload to clean lines: tags and timing leftovers removed, entities decoded."""
    lines = []
    for line in raw.split("\n"):
        if "-->" in line:
            continue
        cleaned = clean_text(html.unescape(_TAG.sub("", line)))
        if cleaned:
            lines.append(" ".join(cleaned.split()))
    return lines


def _parse(text: str, caption_format: CaptionFormat) -> tuple[list[webvtt.Caption], list[str]]:
    """Parse with webvtt-py; return captions and WebVTT header metadata lines."""
    text = text.lstrip("\n")
    if not text.strip():
        return [], []
    if not text.startswith("WEBVTT") and "-->" not in text:
        raise MalformedFileError("no cue timings and no WEBVTT header")
    if caption_format == "subrip":
        try:
            return list(webvtt.from_buffer(io.StringIO(text), format="srt").captions), []
        except (MalformedFileError, MalformedCaptionError):
            text = "WEBVTT\n\n" + _COMMA_MS.sub(r"\1.\2", text)
    elif not text.startswith("WEBVTT"):
        text = "WEBVTT\n\n" + text
    vtt = webvtt.from_string(text)
    return list(vtt.captions), list(vtt.metadata)


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


def collapse_rolling(cues: list[tuple[int, int, list[str]]]) -> list[Segment]:
    """Turn cues into segments, dropping words a cue repeats from the one before it."""
    segments: list[Segment] = []
    previous: list[str] = []
    for start, end, lines in cues:
        shared = _line_overlap(previous, lines)
        new_lines = lines[shared:]
        words = " ".join(new_lines).split()
        if not shared:
            prev_words = " ".join(previous).split()
            words = words[_overlap(prev_words, words) :]
        previous = lines
        if not words:
            if segments and segments[-1].end_ms < end:
                last = segments[-1]
                segments[-1] = Segment(last.start_ms, end, last.text)
            continue
        segments.append(Segment(start, end, " ".join(words)[:MAX_TEXT_CHARS]))
    return segments


def parse_captions(
    text: str, caption_format: CaptionFormat, declared_language: str | None = None
) -> ParsedCaptions:
    """Parse a caption file; raise CaptionError when it is unparsable or has no cue."""
    bounded, timing_lines, limited = _bound_cues(normalise_newlines(text))
    try:
        captions, metadata = _parse(bounded, caption_format)
    except (MalformedFileError, MalformedCaptionError, ValueError) as exc:
        raise CaptionError(Reason.INVALID_CAPTIONS) from exc
    cues: list[tuple[int, int, list[str]]] = []
    dropped = max(0, timing_lines - len(captions))
    for caption in captions:
        start, end = caption.start_time.in_milliseconds(), caption.end_time.in_milliseconds()
        lines = _cue_lines(caption.raw_text)
        if end <= start or start < 0 or not lines:
            dropped += 1
            continue
        cues.append((start, end, lines))
    if not cues:
        raise CaptionError(Reason.INVALID_CAPTIONS if timing_lines else Reason.NO_CAPTIONS)
    segments = collapse_rolling(cues)
    reasons: list[Reason] = []
    if len(segments) > MAX_SEGMENTS or limited:
        segments, limited = segments[:MAX_SEGMENTS], True
        reasons.append(Reason.CUES_LIMITED)
    if dropped:
        reasons.append(Reason.INVALID_CUES)
    language = _header_language(metadata) or normalise_tag(declared_language)
    return ParsedCaptions(caption_format, segments, language, dropped, limited, reasons)
