"""Text-fragment directives (WICG Text Fragments) and one quote's whole answer."""

from __future__ import annotations

from urllib.parse import unquote

from worker.content.quotes.folding import fold
from worker.content.quotes.fragments import (
    EDGE_WORDS,
    MAX_EXACT_CHARS,
    directive,
    encode,
    fragment_url,
    matches,
    terms,
)
from worker.content.quotes.verify import ChunkAnchor, Source, verify

TEXT = (
    "Rivers rise in spring.\n"
    "The water was clear and cold. Fish moved upward, a well-known sign.\n"
    "Nothing changed in summer.\n"
    "Then, again: the water was clear and cold. Nobody swam."
)


def parse(found: str) -> dict[str, str | None]:
    """A directive's parts, decoded (what a browser reads out of it)."""
    parts = found.removeprefix("text=").split(",")
    prefix = unquote(parts.pop(0)[:-1]) if parts[0].endswith("-") else None
    suffix = unquote(parts.pop()[1:]) if parts[-1].startswith("-") else None
    end = unquote(parts[1]) if len(parts) == 2 else None
    return {"prefix": prefix, "start": unquote(parts[0]), "end": end, "suffix": suffix}


class TestDirective:
    def test_encoding(self) -> None:
        """The directive's syntax characters and all but unreserved ones are percent-encoded."""
        assert encode("a-b, c&d") == "a%2Db%2C%20c%26d"
        assert encode("“été”…") == "%E2%80%9C%C3%A9t%C3%A9%E2%80%9D%E2%80%A6"
        assert encode("plain_text.~") == "plain_text.~"

    def test_unique_passage_is_quoted_whole(self) -> None:
        """A short passage on one line that occurs once: textStart only."""
        start = TEXT.index("Fish moved")
        end = TEXT.index(" sign.") + len(" sign.")
        found = directive(TEXT, start, end)
        assert found == "text=Fish%20moved%20upward%2C%20a%20well%2Dknown%20sign."
        words = tuple(TEXT[start:end].split())
        assert list(matches(fold(TEXT), words, None, (), ())) == [(start, end)]

    def test_repeated_passage_gains_context(self) -> None:
        """A passage the text says twice (case aside) names its own place by words around it,
        for the first place and the second alike."""
        sentence = "the water was clear and cold."
        first = TEXT.lower().index(sentence)
        second = TEXT.lower().index(sentence, first + 1)
        for at in (first, second):
            parts = parse(directive(TEXT, at, at + len(sentence)) or "")
            assert parts["prefix"] and parts["suffix"], parts
            words = tuple(str(parts["start"]).split())
            prefix, suffix = (
                tuple(str(parts["prefix"]).split()),
                tuple(str(parts["suffix"]).split()),
            )
            assert [m[0] for m in matches(fold(TEXT), words, None, prefix, suffix)] == [at]
            assert len(list(matches(fold(TEXT), words, None, (), ()))) == 2

    def test_long_or_multiline_passages_use_start_and_end(self) -> None:
        """Across lines, or past MAX_EXACT_CHARS: the first and last EDGE_WORDS words."""
        start = TEXT.index("Fish moved")
        end = TEXT.index("in summer.") + len("in summer.")
        parts = parse(directive(TEXT, start, end) or "")
        assert parts["start"] == "Fish moved upward, a well-known"
        assert parts["end"] == "Nothing changed in summer."
        long = " ".join(f"word{n}" for n in range(MAX_EXACT_CHARS // 5))
        first, last = terms(long)
        assert len(first) == EDGE_WORDS and last is not None and len(last) == EDGE_WORDS
        assert terms("   \n ") == ((), None)

    def test_fragment_url(self) -> None:
        """The page's URL (its own fragment dropped) with the directive after `#:~:`."""
        link = fragment_url("https://example.org/a#top", TEXT, 0, 6)
        assert link == "https://example.org/a#:~:text=Rivers"
        assert fragment_url("https://example.org/a", TEXT, 5, 5) is None


class TestVerify:
    def test_answer_for_a_page(self) -> None:
        """Offsets, passage, occurrences, the chunks it overlaps, context cut at words."""
        chunks = [
            ChunkAnchor("c0", 0, 22),
            ChunkAnchor("c1", 23, 90),
            ChunkAnchor("old", None, None),
        ]
        source = Source(TEXT, "https://example.org/a", "/rev", chunks)
        answer = verify(source, "spring. The water was clear", context_chars=12)
        assert answer["match"] == "normalized"
        assert (
            answer["text"]
            == TEXT[answer["start"] : answer["end"]]
            == "spring.\nThe water was clear"
        )
        assert answer["chunk_ids"] == ["c0", "c1"]
        assert answer["context_before"] == "rise in "  # cut back to whole words
        assert answer["context_after"] == " and cold."
        assert answer["occurrences"] == 1 and answer["cues"] == []
        assert str(answer["fragment_url"]).startswith("https://example.org/a#:~:text=spring.,")

    def test_answer_for_captions(self) -> None:
        """Cues it overlaps, with their times; no text fragment for a caption file."""
        segments = [
            {"start_ms": 0, "end_ms": 1_000, "text": "Rivers rise"},
            {"start_ms": 1_000, "end_ms": 2_000, "text": "in spring."},
            {"start_ms": 2_000, "end_ms": 3_000, "text": "Fish swim."},
        ]
        source = Source("Rivers rise\nin spring.\nFish swim.", None, "/rev", (), segments)
        answer = verify(source, "rise in spring")
        assert [(c["index"], c["start_ms"]) for c in answer["cues"]] == [(0, 0), (1, 1_000)]
        assert answer["fragment_url"] is None
        none = verify(source, "Nothing like this was said in the talk at all.")
        assert (none["match"], none["cues"], none["revision_url"]) == ("none", [], "/rev")
