"""Quote folding and matching: every folding rule, the offset map, and failing closed."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.content.quotes.folding import INVISIBLE, fold, fold_char, fold_quote
from worker.content.quotes.matching import (
    FUZZY_THRESHOLD,
    MAX_UNMATCHED_RUN,
    MIN_FUZZY_CHARS,
    count_bounded,
    find_bounded,
    match_quote,
)

TEXT = (
    "Alpine lakes hold less oxygen in late summer, when the water is warm and still.\n"
    "Researchers from the institute sampled twelve lakes between 2019 and 2023.\n\n"
    "The deepest lake, at 84 metres, showed the sharpest decline in dissolved oxygen near "
    "the bottom. Fish moved upward as a result.\n"
    "She said the results were alarming, and the survey will continue next year."
)

LONG = (
    "The cause is not a mystery. Air temperatures in the region have risen by roughly two "
    "degrees since the 1960s, ice forms later and melts earlier, and the summer season during "
    "which a lake is layered has grown by almost a month."
)


class TestFolding:
    """Each folding rule, and the map back to the original's code points."""

    @pytest.mark.parametrize(
        ("original", "folded"),
        [
            ("Straße", "strasse"),  # casefold
            ("ＡＢＣ１２", "abc12"),  # full-width forms (NFKC)
            ("ﬁne ﬂow", "fine flow"),  # ligatures
            ("x²", "x2"),  # superscripts
            ("wait…", "wait..."),  # ellipsis
            (
                "‘single’ “double” „low‟ «guillemets» ′prime″",
                '\'single\' "double" "low" "guillemets" \'prime"',
            ),
            ("a‐b‑c‒d–e—f―g−h", "a-b-c-d-e-f-g-h"),  # every dash
            (
                "soft\u00adhyphen zero\u200bwidth join\u200d\u2060ed\ufeff",
                "softhyphen zerowidth joined",
            ),
            ("many   spaces\n\n\tand\u00a0no-break\u2003em", "many spaces and no-break em"),
            ("« Oui », dit-elle, «non»", '"oui", dit-elle, "non"'),  # guillemets, inner space
            ("precomposed é", "precomposed e\u0301"),
            ("decomposed e\u0301", "decomposed e\u0301"),
        ],
    )
    def test_rule(self, original: str, folded: str) -> None:
        """Each rule folds as documented in worker/content/quotes/folding.py."""
        assert fold(original).text == folded

    def test_invisible_characters_do_not_split_whitespace_runs(self) -> None:
        """A soft hyphen between spaces leaves one space."""
        assert fold("a \u00ad b").text == "a b"
        assert fold_char("\u00ad") == "" and fold_char("\n") == " "

    def test_offsets_cover_whole_original_characters(self) -> None:
        """Every folded character maps back to the original characters it came from."""
        text = "Hello\u00a0 World —  “Straße” ﬁne e\u0301té…\n\nsoft\u00adhyphen  end"
        folded = fold(text)
        pieces = {}
        for index in range(len(folded.text)):
            start, end = folded.span(index, index + 1)
            pieces[index] = text[start:end]
        assert pieces[folded.text.index("w")] == "W"
        assert pieces[folded.text.index("ss")] == "ß" == pieces[folded.text.index("ss") + 1]
        assert pieces[folded.text.index("fi")] == "ﬁ"
        assert pieces[folded.text.index("...")] == "…"
        assert pieces[folded.text.index(" soft")] == "\n\n"
        start, end = folded.span(
            folded.text.index("softhyphen"), folded.text.index("softhyphen") + 10
        )
        assert text[start:end] == "soft\u00adhyphen"

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet=st.sampled_from("aB ß\u00ad\n\t—“…ﬁé\u0301xZ\u00a0"), max_size=40))
    def test_every_folded_span_refolds_to_itself(self, text: str) -> None:
        """Any folded stretch, mapped back and folded again, contains the stretch (a span may
        grow to whole characters, never shrink)."""
        folded = fold(text)
        for start in range(len(folded.text)):
            for end in range(start + 1, min(len(folded.text), start + 6) + 1):
                low, high = folded.span(start, end)
                assert 0 <= low < high <= len(text)
                assert folded.text[start:end].strip(" ") in fold(text[low:high]).text

    @settings(max_examples=500, deadline=None)
    @given(
        st.text(
            alphabet=st.sampled_from(
                "aAzZß ẞİıﬁ\u00ad\u200b\n\t\u00a0\u202f«»“”‘’—–…éÉe\u0301Ａｂ²"
            ),
            max_size=60,
        )
    )
    def test_fold_is_per_character_folding_then_whitespace_runs(self, text: str) -> None:
        """The fast fold (C-speed stretches, regex places) equals the plain definition: each
        character folded alone, guillemets taking their inner space, whitespace runs one."""
        inside = f"[\\s\u202f{INVISIBLE}]*"
        plain = re.sub(f"«{inside}", "«", re.sub(f"{inside}»", "»", text))
        reference = re.sub(" {2,}", " ", "".join(fold_char(c) for c in plain))
        assert fold(text).text == reference

    def test_quote_is_stripped(self) -> None:
        """A quote's leading and trailing whitespace is no part of it."""
        assert fold_quote("  \n “Hi” \t") == '"hi"'


class TestMatching:
    """exact, normalized, fuzzy and none, in that order; offsets into the original text."""

    def test_exact(self) -> None:
        """A verbatim quote is exact, and its offsets slice it back."""
        quote = "Researchers from the institute sampled twelve lakes"
        found = match_quote(TEXT, f"  {quote}\n")
        assert (found.kind, found.score) == ("exact", 100.0)
        assert TEXT[found.start : found.end] == quote

    @pytest.mark.parametrize(
        "quote",
        [
            "researchers  from the INSTITUTE sampled\ntwelve lakes",  # re-cased, re-spaced
            "still. Researchers from the institute",  # across a line break
            "the bottom.  Fish moved upward",  # across a double space
            "She said the results were alarming, and the survey will continue next year.",
        ],
    )
    def test_normalized(self, quote: str) -> None:
        """Re-spaced and re-cased quotes are normalized; the slice folds to the quote."""
        found = match_quote(TEXT, quote)
        assert found.kind in ("normalized", "exact")
        assert found.start is not None
        assert fold(TEXT[found.start : found.end]).text == fold_quote(quote)

    def test_typography_is_normalized(self) -> None:
        """Typographic quotes, dashes, ellipses and soft hyphens fold to plain ones."""
        text = "He wrote: “It’s over — for now…” and left; the re\u00adport ends."
        for quote in ['"It\'s over - for now..."', "the report ends"]:
            found = match_quote(text, quote)
            assert found.kind == "normalized", quote
            assert found.start is not None
            assert fold(text[found.start : found.end]).text == fold_quote(quote)

    def test_fuzzy(self) -> None:
        """A lightly paraphrased quote is fuzzy, with its score, at the source's passage."""
        quote = "The deepest lake, at 84 meters, showed the steepest decline in dissolved oxygen"
        found = match_quote(TEXT, quote)
        assert found.kind == "fuzzy"
        assert found.score is not None and FUZZY_THRESHOLD <= found.score < 100
        assert TEXT[found.start : found.end] == (
            "The deepest lake, at 84 metres, showed the sharpest decline in dissolved oxygen"
        )

    @pytest.mark.parametrize(
        "quote",
        [
            # Absent: not said anywhere.
            "Mountain rivers carry more sediment in spring than in any other season.",
            # Stitched from two places far apart.
            "Alpine lakes hold less oxygen in late summer. Fish moved upward as a result.",
            "Researchers from the institute sampled twelve lakes and the survey will continue.",
            # A word's insides are not a word.
            "he said the results",
            # Too short to be matched approximately.
            "alpine lake holds",
        ],
    )
    def test_none(self, quote: str) -> None:
        """Absent, stitched and partial-word quotes match nothing."""
        assert match_quote(TEXT, quote).kind == "none"

    def test_partial_words(self) -> None:
        """A quote that starts inside a word is not exact or normalized; approximately, it
        covers the whole word, and says so with its score."""
        found = match_quote(TEXT, "searchers from the institute sampled twelve")
        assert found.kind == "fuzzy" and found.score is not None and found.score < 100
        assert TEXT[found.start : found.end] == "Researchers from the institute sampled twelve"

    def test_each_piece_of_a_stitched_quote_alone(self) -> None:
        """Asked for separately, the pieces of a stitched quote each match."""
        for piece in ("Alpine lakes hold less oxygen in late summer", "Fish moved upward"):
            assert match_quote(TEXT, piece).kind == "exact"

    def test_an_unmatched_run_longer_than_the_bound_is_none(self) -> None:
        """One inserted stretch past MAX_UNMATCHED_RUN fails a quote that otherwise aligns."""
        base = "The deepest lake, at 84 metres, showed the sharpest decline in dissolved oxygen"
        inside = base.replace("showed", "showed " + "x" * (MAX_UNMATCHED_RUN + 2))
        assert match_quote(TEXT * 3, inside).kind == "none"
        within = base.replace("showed", "showed " + "x" * 6)
        assert match_quote(TEXT, within).kind == "fuzzy"

    def test_long_quotes_with_foreign_pieces_are_none(self) -> None:
        """A long passage with a clause from elsewhere tacked on at either end, or swapped in
        for one of its own, still scores over the threshold: the unmatched runs fail it."""
        text = "Brunner is sceptical.\n" + TEXT + "\n" + LONG
        clause = (
            "Brunner is sceptical."  # shorter than MAX_UNMATCHED_RUN, longer than MAX_ADDED_RUN
        )
        swapped = LONG.replace(
            "ice forms later and melts earlier", "phosphorus levels have fallen by"
        )
        for quote in (f"{LONG} {clause}", f"{clause} {LONG}", swapped):
            assert match_quote(text, quote).kind == "none", quote
        light = LONG.replace("roughly two degrees", "about two degrees").replace(
            "a month", "one month"
        )
        found = match_quote(text, light)
        assert found.kind == "fuzzy" and text[found.start : found.end] == LONG

    def test_empty_and_blank_quotes_are_none(self) -> None:
        """Nothing to look for is no match."""
        assert match_quote(TEXT, "").kind == "none"
        assert match_quote(TEXT, " \n\u00ad ").kind == "none"
        assert len("alpine lake holds") < MIN_FUZZY_CHARS

    def test_word_boundaries(self) -> None:
        """Occurrences count at word boundaries only, and scripts without spaces match inside."""
        assert find_bounded("the cat concatenates", "cat") == 4
        assert find_bounded("concatenate", "cat") == -1
        assert count_bounded("cat, cat and cat", "cat") == 3
        assert match_quote("東京は日本の首都です。", "日本の首都").kind == "exact"

    def test_first_occurrence_wins(self) -> None:
        """A quote said twice is placed at its first occurrence."""
        text = "THE LAKE FROZE. Then The Lake froze again."
        found = match_quote(text, "the lake froze")
        assert (found.kind, found.start) == ("normalized", 0)


WORDS = [
    "lake",
    "river",
    "Oxygen",
    "cold",
    "deep",
    "summer",
    "fish",
    "Été",
    "straße",
    "—",
    "“said”",
]
OTHER = ["glacier", "meadow", "council", "bridge", "orchard", "harbour"]


class TestProperties:
    """Over generated texts: what the text says is found where it is; what it does not, never."""

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(st.sampled_from(WORDS), min_size=8, max_size=60),
        st.data(),
    )
    def test_a_reworded_slice_is_found_and_slices_back(
        self, words: list[str], data: st.DataObject
    ) -> None:
        """A stretch of whole words, re-cased and re-spaced, is exact or normalized, and the
        offsets slice the text back to it, folded."""
        text = " ".join(words).replace(" deep ", "\n\ndeep ")
        start = data.draw(st.integers(0, len(words) - 4))
        end = data.draw(st.integers(start + 3, len(words)))
        quote = "  ".join(words[start:end])
        quote = data.draw(st.sampled_from([quote, quote.upper(), quote.lower(), f"\n{quote}\t"]))
        found = match_quote(text, quote)
        assert found.kind in ("exact", "normalized")
        assert found.start is not None and found.end is not None
        assert fold(text[found.start : found.end]).text == fold_quote(quote)

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(st.sampled_from(WORDS), min_size=5, max_size=80),
        st.lists(st.sampled_from(OTHER), min_size=3, max_size=30),
    )
    def test_words_the_text_never_says_are_never_matched(
        self, words: list[str], other: list[str]
    ) -> None:
        """A quote made of words the text does not contain matches nothing, however long."""
        assert match_quote(" ".join(words), " ".join(other)).kind == "none"
