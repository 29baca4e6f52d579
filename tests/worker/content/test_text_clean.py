"""Cleaning untrusted text (decoding bytes is in test_decoding.py)."""

import pytest

from worker.content.text import clean_inline, clean_text, strip_invisible
from worker.domain.languages import is_mismatch, normalise_tag, primary_subtag, same_language


class TestStripInvisible:
    """Invisible Unicode tricks are removed."""

    @pytest.mark.parametrize(
        "char",
        [
            "\u200b",  # zero-width space
            "\u200c",  # zero-width non-joiner
            "\u200d",  # zero-width joiner
            "\u2060",  # word joiner
            "\ufeff",  # BOM / zero-width no-break space
            "\u00ad",  # soft hyphen
            "\u202e",  # right-to-left override
            "\u202a",  # left-to-right embedding
            "\u2066",  # left-to-right isolate
            "\u2069",  # pop directional isolate
            "\u200e",  # left-to-right mark
            "\U000e0041",  # tag latin capital A
            "\U000e007f",  # cancel tag
            "\x00",
            "\x07",
            "\x1b",
            "\x7f",
            "\x85",
        ],
    )
    def test_removes_invisible_and_control_characters(self, char: str) -> None:
        """Each invisible or control character disappears, the letters around it stay."""
        assert strip_invisible(f"pay{char}pal") == "paypal"

    def test_keeps_newlines_tabs_and_letters(self) -> None:
        """Line feeds, tabs, accents, CJK and emoji survive."""
        text = "é\tñ\n日本語 😀"
        assert strip_invisible(text) == text

    def test_ascii_fast_path_drops_controls(self) -> None:
        """Pure-ASCII text also loses control characters."""
        assert strip_invisible("a\x01b\x1fc\n") == "abc\n"


class TestCleanText:
    """Whitespace and normalisation of untrusted text."""

    def test_nfc_normalisation(self) -> None:
        """Decomposed accents are composed (NFC)."""
        assert clean_text("Cafe\u0301") == "Café"

    def test_collapses_space_runs_and_strips_lines(self) -> None:
        """Runs of spaces, tabs and no-break spaces become one space; lines are trimmed."""
        assert clean_text("  a  \t b\u00a0\u00a0c  \n  d ") == "a b c\nd"

    def test_keeps_paragraph_breaks_and_collapses_blank_runs(self) -> None:
        """A blank line between paragraphs stays; three or more newlines become two."""
        assert clean_text("one\n\n\n\n\ntwo\nthree") == "one\n\ntwo\nthree"

    def test_crlf_cr_and_unicode_separators_become_newlines(self) -> None:
        """CRLF, lone CR, LINE SEPARATOR and PARAGRAPH SEPARATOR are line breaks."""
        assert clean_text("a\r\nb\rc\u2028d\u2029e") == "a\nb\nc\nd\n\ne"

    def test_bidi_override_cannot_reorder_text(self) -> None:
        """A right-to-left override hiding a file extension is neutralised."""
        assert clean_text("invoice\u202egpj.exe") == "invoicegpj.exe"

    def test_lines_of_only_invisible_characters_vanish(self) -> None:
        """A line made only of zero-width characters becomes empty and is collapsed."""
        assert clean_text("a\n\u200b\u200b\n\n\nb") == "a\n\nb"

    def test_empty_input(self) -> None:
        """Whitespace-only input cleans to the empty string."""
        assert clean_text(" \n\t\u200b ") == ""

    def test_clean_inline_flattens_newlines(self) -> None:
        """Titles and descriptions become one line; empty ones become None."""
        assert clean_inline(" A\n  title\u200b here ") == "A title here"
        assert clean_inline("  \u00ad ") is None
        assert clean_inline(None) is None


class TestLanguages:
    """Language tag normalisation and comparison."""

    def test_normalise(self) -> None:
        """Underscores become hyphens; lists give their first tag; junk gives None."""
        assert normalise_tag("en_GB") == "en-GB"
        assert normalise_tag(" fr-CA, en ") == "fr-CA"
        assert normalise_tag("de;q=0.9") == "de"
        assert normalise_tag("") is None
        assert normalise_tag("x") is None
        assert normalise_tag("english language") == "english"
        assert normalise_tag("12") is None
        assert normalise_tag("und") is None
        assert normalise_tag("en-" + "a" * 40) is None

    def test_primary_subtag_match(self) -> None:
        """Primary subtags compare case-insensitively: en-GB matches EN and en-us."""
        assert primary_subtag("EN-gb") == "en"
        assert same_language("en-GB", "EN")
        assert same_language("en-us", "en-GB")
        assert not same_language("en", "fr")

    def test_mismatch_only_when_both_known(self) -> None:
        """No requested or no declared language is never a mismatch."""
        assert is_mismatch("fr", "en-GB")
        assert not is_mismatch("en", "en-GB")
        assert not is_mismatch(None, "en")
        assert not is_mismatch("en", None)
