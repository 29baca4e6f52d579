"""Splitting revisions into passages, and the full-text query helpers."""

from __future__ import annotations

import uuid
from pathlib import Path

from worker.content.chunking import (
    CUE_PAUSE_MS,
    MAX_CHARS,
    TARGET_CHARS,
    chunk_id,
    split_cues,
    split_revision,
    split_text,
)
from worker.store.fulltext import fts5_query, query_terms, ts_config

ROOT = Path(__file__).parents[2]
PARAGRAPH = "Dissolved oxygen falls at night as algae stop photosynthesis. " * 4


class TestSplitText:
    """Documents split into whole paragraphs."""

    def test_short_text_is_one_passage(self) -> None:
        """A text under the target size is a single passage, unchanged."""
        passages = split_text("One paragraph.\nAnother one.")
        assert [p.text for p in passages] == ["One paragraph.\nAnother one."]
        assert passages[0].ordinal == 0 and passages[0].start_ms is None

    def test_paragraphs_are_never_cut(self) -> None:
        """Every passage is a run of whole paragraphs, in order, and nothing is lost."""
        paragraphs = [f"Paragraph {n}. {PARAGRAPH}".strip() for n in range(12)]
        passages = split_text("\n\n".join(paragraphs))
        assert len(passages) > 1
        rejoined = [line for p in passages for line in p.text.split("\n") if line]
        assert rejoined == paragraphs
        assert all(len(p.text) <= MAX_CHARS for p in passages)
        assert [p.ordinal for p in passages] == list(range(len(passages)))

    def test_long_paragraph_is_cut_at_sentences(self) -> None:
        """A paragraph longer than the bound is cut between sentences, never mid-word."""
        sentence = "The lake at Bergsee warmed by two degrees over a decade of summers. "
        passages = split_text(sentence * 60)
        assert len(passages) > 1
        for passage in passages:
            assert len(passage.text) <= MAX_CHARS
            assert passage.text.endswith("summers.")

    def test_blank_text_has_no_passages(self) -> None:
        """Whitespace alone yields nothing."""
        assert split_text(" \n\n \n") == []


class TestSplitCues:
    """Caption tracks split at whole cues."""

    @staticmethod
    def cue(start: int, text: str, length: int = 2_000) -> dict[str, object]:
        return {"start_ms": start, "end_ms": start + length, "text": text}

    def test_cues_are_grouped_with_their_span(self) -> None:
        """Consecutive cues form one passage spanning their times."""
        passages = split_cues([self.cue(0, "Good morning."), self.cue(2_000, "Welcome.")])
        assert len(passages) == 1
        assert passages[0].text == "Good morning. Welcome."
        assert (passages[0].start_ms, passages[0].end_ms) == (0, 4_000)

    def test_long_pause_starts_a_new_passage(self) -> None:
        """A silence of CUE_PAUSE_MS or more separates passages."""
        passages = split_cues(
            [self.cue(0, "Part one."), self.cue(2_000 + CUE_PAUSE_MS, "Part two.")]
        )
        assert [p.text for p in passages] == ["Part one.", "Part two."]

    def test_size_bound_never_splits_a_cue(self) -> None:
        """Many cues are packed near the target size; every cue stays whole."""
        cues = [self.cue(i * 2_000, f"Cue number {i} says something useful.") for i in range(200)]
        passages = split_cues(cues)
        assert len(passages) > 1
        assert all(len(p.text) <= TARGET_CHARS + 100 for p in passages)
        words = " ".join(p.text for p in passages)
        assert words == " ".join(str(c["text"]) for c in cues)

    def test_revision_with_segments_splits_by_cues(self) -> None:
        """A revision with segments is split by its cues, not its text."""
        passages = split_revision("ignored text", [self.cue(0, "Spoken words.")])
        assert [p.text for p in passages] == ["Spoken words."]


class TestAnchors:
    """Every passage is its revision's text between its anchors."""

    def test_text_passages_slice_the_text(self) -> None:
        """Paragraphs, blank runs, long paragraphs cut at sentences and at words: the slice by
        (char_start, char_end) is the passage, and passages come in order without overlap."""
        long_words = "word " * 400
        sentence = "The lake at Bergsee warmed by two degrees over a decade of summers.  "
        text = (
            "  Title line\n\n\n"
            + "\n".join(f"Paragraph {n}. {PARAGRAPH}" for n in range(9))
            + "\n \n"
            + sentence * 40
            + "\n"
            + long_words
            + "\r\nÉté — “quoted” ﬁnal line\u00ad.  "
        )
        passages = split_text(text)
        assert len(passages) > 5
        previous_end = 0
        for passage in passages:
            assert passage.char_start is not None and passage.char_end is not None
            assert text[passage.char_start : passage.char_end] == passage.text
            assert passage.char_start >= previous_end
            assert len(passage.text) <= MAX_CHARS
            previous_end = passage.char_end
        assert passages[0].text.startswith("Title line")
        assert passages[-1].text.endswith("ﬁnal line\u00ad.")

    def test_caption_passages_slice_the_text(self) -> None:
        """Caption passages are the stretch of the revision's text their cues say; rolling
        repeats are said once, as in the text."""
        from worker.content.captions import parse_captions
        from worker.content.quotes.cues import cue_spans

        vtt = "WEBVTT\n\n" + "".join(
            f"00:00:{n:02d}.000 --> 00:00:{n:02d}.900\nLine {n} of the talk,\nsecond half {n}.\n\n"
            for n in range(50)
        )
        parsed = parse_captions(vtt, "webvtt")
        segments = [s.as_dict() for s in parsed.segments]
        passages = split_revision(parsed.text, segments)
        assert len(passages) > 1
        for passage in passages:
            assert passage.char_start is not None and passage.char_end is not None
            assert parsed.text[passage.char_start : passage.char_end] == passage.text
        spans = cue_spans(parsed.text, segments)
        assert all(span is not None for span in spans)
        rolling = (ROOT / "tests/fixtures/captions/rolling_auto.vtt").read_text()
        rolled = parse_captions(rolling, "webvtt")
        cues = [s.as_dict() for s in rolled.segments]
        placed = cue_spans(rolled.text, cues)
        said = [rolled.text[s:e] if s is not None else None for s, e in _pairs(placed)]
        assert said == [
            "hello everyone welcome",
            None,
            "to the channel",
            None,
            "today we talk about rivers",
        ]
        (passage,) = split_revision(rolled.text, cues)
        assert passage.text == rolled.text and (passage.char_start, passage.char_end) == (
            0,
            len(rolled.text),
        )

    def test_cues_the_text_does_not_say_have_no_anchor(self) -> None:
        """A revision whose text was cut before some cues: their passages keep the cues' words."""
        cues = [
            {"start_ms": 0, "end_ms": 1_000, "text": "Said and kept."},
            {"start_ms": 9_000, "end_ms": 9_500, "text": "Past the cut."},
        ]
        first, second = split_cues(cues, "Said and kept.")
        assert (first.char_start, first.char_end, first.text) == (0, 14, "Said and kept.")
        assert (second.char_start, second.char_end, second.text) == (None, None, "Past the cut.")


def _pairs(spans: list[tuple[int, int] | None]) -> list[tuple[int | None, int | None]]:
    return [span if span is not None else (None, None) for span in spans]


class TestChunkIds:
    """Chunk ids are durable and opaque."""

    def test_same_position_same_id(self) -> None:
        """The id depends only on (evidence, revision, ordinal)."""
        evidence = uuid.uuid4()
        assert chunk_id(evidence, 1, 0) == chunk_id(evidence, 1, 0)
        assert (
            len({chunk_id(evidence, 1, 0), chunk_id(evidence, 2, 0), chunk_id(evidence, 1, 1)}) == 3
        )
        assert chunk_id(evidence, 1, 0).startswith("ch_")


class TestQueries:
    """User queries become safe full-text queries."""

    def test_fts5_query_quotes_every_term(self) -> None:
        """FTS5 operators and quotes in a query are plain words, never syntax."""
        assert fts5_query('lake NEAR(oxygen) "x" -y*') == '"lake" "near" "oxygen" "x" "y"'
        assert fts5_query("  ...  ") is None

    def test_terms_are_unique_and_bounded(self) -> None:
        """Repeated words count once; at most 32 are kept."""
        assert query_terms("Lake lake LAKE ice") == ["lake", "ice"]
        assert len(query_terms(" ".join(f"w{i}" for i in range(100)))) == 32

    def test_language_configuration(self) -> None:
        """Language tags map to PostgreSQL configurations by primary subtag."""
        assert ts_config("en-GB") == "english"
        assert ts_config("nb") == "norwegian"
        assert ts_config("ja") == "simple"
        assert ts_config(None) == "simple"
