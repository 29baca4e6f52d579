"""WebVTT read the way the W3C WebVTT specification's parser does (section names below).

webvtt-py reads the cue settings and the region settings to the specification (its
`CueSettings` and `Region` keep the last valid value of each setting and ignore the rest, as
"Parse the WebVTT cue settings" and "Collect WebVTT region settings" say), so those are its.
It does not follow the specification for the file signature, the header, REGION blocks, the
timestamp syntax or which cue a bad block drops, so this module does those. Pure functions of
strings: no I/O, nothing to pickle but strings, numbers and settings.
"""

import html
import re
from dataclasses import dataclass, field

from webvtt.models import CueSettings, Region

#: "ASCII whitespace" of the specification's string rules.
_WHITESPACE = " \t\n\f\r"
_DIGITS = re.compile(r"[0-9]+")
_ARROW = "-->"
#: A cue text tag: "<" up to the first ">" or the end of the cue text (see `cue_text`).
_TAG = re.compile(r"<[^>]*>?")


class NotWebVTT(ValueError):
    """The input fails the file signature check: the specification says it is not WebVTT."""


@dataclass(frozen=True)
class Cue:
    """A WebVTT cue: identifier, start and end in milliseconds, settings, raw cue text."""

    identifier: str
    start_ms: int
    end_ms: int
    settings: str
    text: str

    @property
    def cue_settings(self) -> CueSettings:
        """The cue's settings as the specification reads them (webvtt-py)."""
        return CueSettings.from_string(self.settings)


@dataclass
class WebVTTFile:
    """What the WebVTT parser algorithm returns, plus the cue blocks it dropped."""

    header: list[str] = field(default_factory=list)
    cues: list[Cue] = field(default_factory=list)
    regions: list[Region] = field(default_factory=list)
    stylesheets: list[str] = field(default_factory=list)
    #: Blocks that had a cue timings line whose timings did not parse (the parser drops them).
    dropped_cues: int = 0


def preprocess(text: str) -> str:
    """Input preprocessing ("WebVTT parser algorithm", step 1).

    The decoder drops one leading BOM; NUL becomes U+FFFD; CRLF, then CR, become LF.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\x00", "\ufffd").replace("\r\n", "\n").replace("\r", "\n")


def check_signature(text: str) -> None:
    """The file signature ("WebVTT parser algorithm", steps 3-5); raise NotWebVTT if it fails.

    `text` is preprocessed. It must be "WEBVTT" alone, or "WEBVTT" followed by a space, a tab
    or a line feed: nothing may come before it, not even a blank line.
    """
    if len(text) < 6 or not text.startswith("WEBVTT"):
        raise NotWebVTT("no WEBVTT file signature")
    if len(text) > 6 and text[6] not in " \t\n":
        raise NotWebVTT("WEBVTT not followed by a space, a tab or a line terminator")


def parse_timestamp(line: str, pos: int) -> tuple[int, int] | None:
    """ "Collect a WebVTT timestamp" at `pos`: (milliseconds, new position), or None.

    Hours have any number of digits and are optional; minutes and seconds have exactly two
    digits and are below 60; the fraction has exactly three digits.
    """
    hours_first = False
    match = _DIGITS.match(line, pos)
    if match is None:
        return None
    first, pos = match.group(), match.end()
    if len(first) != 2 or int(first) > 59:
        hours_first = True
    if line[pos : pos + 1] != ":":
        return None
    match = _DIGITS.match(line, pos + 1)
    if match is None or len(match.group()) != 2:
        return None
    second, pos = match.group(), match.end()
    if hours_first or line[pos : pos + 1] == ":":
        if line[pos : pos + 1] != ":":
            return None
        match = _DIGITS.match(line, pos + 1)
        if match is None or len(match.group()) != 2:
            return None
        hours, minutes, seconds, pos = int(first), int(second), int(match.group()), match.end()
    else:
        hours, minutes, seconds = 0, int(first), int(second)
    if line[pos : pos + 1] != ".":
        return None
    match = _DIGITS.match(line, pos + 1)
    if match is None or len(match.group()) != 3:
        return None
    if minutes > 59 or seconds > 59:
        return None
    millis = ((hours * 60 + minutes) * 60 + seconds) * 1000 + int(match.group())
    return millis, match.end()


def _skip_whitespace(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in _WHITESPACE:
        pos += 1
    return pos


def parse_timings(line: str) -> tuple[int, int, str] | None:
    """ "Collect WebVTT cue timings and settings": (start ms, end ms, settings), or None.

    The settings are the rest of the line after the end time, read by webvtt-py's
    `CueSettings` ("Parse the WebVTT cue settings"): invalid ones are ignored, not fatal.
    """
    start = parse_timestamp(line, _skip_whitespace(line, 0))
    if start is None:
        return None
    pos = _skip_whitespace(line, start[1])
    if line[pos : pos + 3] != _ARROW:
        return None
    end = parse_timestamp(line, _skip_whitespace(line, pos + 3))
    if end is None:
        return None
    return start[0], end[0], line[end[1] :].strip(_WHITESPACE)


def _is_keyword_block(buffer: str, keyword: str) -> bool:
    """Whether `buffer` is `keyword` followed by nothing but ASCII whitespace."""
    return buffer.startswith(keyword) and not buffer[len(keyword) :].strip(_WHITESPACE)


@dataclass
class _Parser:
    """State of the "WebVTT parser algorithm" over one preprocessed input."""

    text: str
    pos: int = 0
    seen_cue: bool = False
    result: WebVTTFile = field(default_factory=WebVTTFile)

    def line(self) -> tuple[str, bool]:
        """Collect a sequence of code points that are not LF; step past the LF. (line, EOF)."""
        end = self.text.find("\n", self.pos)
        if end < 0:
            line, self.pos = self.text[self.pos :], len(self.text)
            return line, True
        line, self.pos = self.text[self.pos : end], end + 1
        return line, False

    def skip_line_feeds(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == "\n":
            self.pos += 1

    def collect_block(self, in_header: bool) -> None:
        """ "Collect a WebVTT block": a cue, a STYLE or REGION definition, or nothing.

        A block ends at a blank line, or before a line with "-->" that cannot be its timings
        line (that line starts the next block). STYLE and REGION blocks count only before
        the first cue. A block whose timings line fails to parse is dropped whole (counted).
        """
        line_count = 0
        previous = self.pos
        buffer = ""
        seen_arrow = False
        timings: tuple[int, int, str] | None = None
        identifier = ""
        kind: str | None = None
        while True:
            line, seen_eof = self.line()
            line_count += 1
            if _ARROW in line:
                if not in_header and (line_count == 1 or (line_count == 2 and not seen_arrow)):
                    seen_arrow = True
                    previous = self.pos
                    identifier = buffer
                    timings = parse_timings(line)
                    if timings is not None:
                        buffer = ""
                        self.seen_cue = True
                else:
                    self.pos = previous
                    break
            elif not line:
                break
            else:
                if not in_header and line_count == 2 and not self.seen_cue:
                    if _is_keyword_block(buffer, "STYLE"):
                        kind, buffer = "style", ""
                    elif _is_keyword_block(buffer, "REGION"):
                        kind, buffer = "region", ""
                if buffer:
                    buffer += "\n"
                buffer += line
                previous = self.pos
            if seen_eof:
                break
        self._finish_block(in_header, buffer, timings, identifier, seen_arrow, kind)

    def _finish_block(
        self,
        in_header: bool,
        buffer: str,
        timings: tuple[int, int, str] | None,
        identifier: str,
        seen_arrow: bool,
        kind: str | None,
    ) -> None:
        if in_header:
            self.result.header = buffer.split("\n") if buffer else []
        elif timings is not None:
            start, end, settings = timings
            self.result.cues.append(Cue(identifier, start, end, settings, buffer))
        elif seen_arrow:
            self.result.dropped_cues += 1
        elif kind == "style":
            self.result.stylesheets.append(buffer)
        elif kind == "region":
            self._add_region(Region.from_string(buffer))

    def _add_region(self, region: Region) -> None:
        """A later region with the same identifier replaces an earlier one (spec, REGION)."""
        if region.id:
            self.result.regions = [r for r in self.result.regions if r.id != region.id]
        self.result.regions.append(region)


def parse_webvtt(text: str, *, preprocessed: bool = False) -> WebVTTFile:
    """The "WebVTT parser algorithm": signature, header, then blocks; raise NotWebVTT.

    `text` is the decoded file (one leading BOM allowed), or its `preprocess`ed form.
    """
    if not preprocessed:
        text = preprocess(text)
    check_signature(text)
    parser = _Parser(text)
    parser.line()  # the rest of the signature line is ignored
    if parser.pos < len(text) and text[parser.pos] != "\n":
        parser.collect_block(in_header=True)
    elif parser.pos < len(text):
        parser.pos += 1
    parser.skip_line_feeds()
    while parser.pos < len(text):
        parser.collect_block(in_header=False)
        parser.skip_line_feeds()
    return parser.result


def cue_text(raw: str) -> str:
    """The text of a cue's text, as the "WebVTT cue text parsing rules" leave it.

    The "WebVTT cue text tokenizer" ends every tag (start, end, class, annotation, timestamp)
    at its first ">" or at the end of the cue text, so a tag is "<" up to the next ">" or the
    end; the string tokens between tags are kept and their character references decoded
    (HTML's rules, as html.unescape applies them). Line feeds stay.
    """
    return "".join(html.unescape(part) for part in _TAG.split(raw))
