"""Cleaning untrusted text and decoding bytes."""

import codecs

import pytest

from worker.content.text import (
    clean_inline,
    clean_text,
    codec_for,
    decode_body,
    meta_charset,
    sniff_bom,
    strip_invisible,
)
from worker.languages import is_mismatch, normalise_tag, primary_subtag, same_language


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


class TestCodecFor:
    """Charset labels map to Python codecs the way browsers read them."""

    def test_latin1_labels_decode_as_windows_1252(self) -> None:
        """iso-8859-1, latin1 and us-ascii labels are read as windows-1252 (WHATWG)."""
        assert codec_for("ISO-8859-1") == "cp1252"
        assert codec_for("latin1") == "cp1252"
        assert codec_for("us-ascii") == "cp1252"

    def test_known_and_unknown_labels(self) -> None:
        """Known labels resolve (quoted or not); unknown or empty ones give None."""
        assert codec_for('"Shift_JIS"') == "shift_jis"
        assert codec_for("windows-1251") == "cp1251"
        assert codec_for("no-such-charset") is None
        assert codec_for("") is None
        assert codec_for(None) is None


class TestSniffing:
    """BOM and <meta> charset sniffing."""

    @pytest.mark.parametrize(
        ("bom", "codec"),
        [
            (codecs.BOM_UTF8, "utf-8"),
            (codecs.BOM_UTF16_LE, "utf-16-le"),
            (codecs.BOM_UTF16_BE, "utf-16-be"),
            (codecs.BOM_UTF32_LE, "utf-32-le"),
        ],
    )
    def test_bom(self, bom: bytes, codec: str) -> None:
        """Each byte-order mark names its codec and length."""
        assert sniff_bom(bom + b"x") == (codec, len(bom))

    def test_no_bom(self) -> None:
        """Plain bytes have no BOM."""
        assert sniff_bom(b"<html>") == (None, 0)

    def test_meta_charset_forms(self) -> None:
        """Both <meta charset> and <meta http-equiv content=...charset=> are read."""
        assert meta_charset(b'<meta charset="windows-1251">') == "cp1251"
        http_equiv = b'<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">'
        assert meta_charset(http_equiv) == "shift_jis"

    def test_meta_charset_claiming_utf16_means_utf8(self) -> None:
        """An ASCII-readable page claiming UTF-16 is read as UTF-8."""
        assert meta_charset(b'<meta charset="utf-16">') == "utf-8"

    def test_meta_charset_only_near_the_start(self) -> None:
        """A declaration past the scan window is ignored."""
        assert meta_charset(b" " * 5000 + b'<meta charset="koi8-r">') is None


class TestDecodeBody:
    """Bytes to text in several languages and encodings."""

    def test_header_charset_french_latin1(self) -> None:
        """French in ISO-8859-1 decodes with the header's charset."""
        text = "Élève à l'école, cœur"
        assert decode_body(text.encode("cp1252"), "iso-8859-1") == text

    def test_header_charset_russian_cp1251(self) -> None:
        """Russian in windows-1251 decodes with the header's charset."""
        assert decode_body("Привет, мир".encode("cp1251"), "windows-1251") == "Привет, мир"

    def test_meta_charset_japanese_shift_jis(self) -> None:
        """Japanese in Shift_JIS decodes from <meta charset> when the header says nothing."""
        body = b'<meta charset="shift_jis"><p>' + "日本語の記事".encode("shift_jis")
        assert "日本語の記事" in decode_body(body)

    def test_meta_ignored_for_plain_text(self) -> None:
        """Plain text bodies do not honour markup declarations."""
        body = b'<meta charset="koi8-r">' + "é".encode()
        assert decode_body(body, html=False).endswith("é")

    def test_bom_wins_and_is_removed(self) -> None:
        """A UTF-8 BOM is honoured even against a wrong header, and not kept in the text."""
        assert decode_body(codecs.BOM_UTF8 + "naïve".encode(), "iso-8859-1") == "naïve"

    def test_utf16_with_bom(self) -> None:
        """UTF-16 with a BOM decodes."""
        assert decode_body("ünïcode".encode("utf-16")) == "ünïcode"

    def test_undeclared_utf8(self) -> None:
        """Undeclared UTF-8 decodes as UTF-8."""
        assert decode_body("Grüße".encode()) == "Grüße"

    def test_undeclared_legacy_falls_back_to_cp1252(self) -> None:
        """Undeclared non-UTF-8 bytes fall back to windows-1252 (curly quotes included)."""
        assert decode_body("“Déjà”".encode("cp1252")) == "“Déjà”"

    def test_bytes_undefined_in_cp1252_fall_back_to_latin1(self) -> None:
        """Bytes windows-1252 leaves undefined still decode (latin-1), never raise."""
        assert decode_body(b"a\x81b") == "a\x81b"

    def test_wrong_header_with_utf8_body_is_read_as_utf8(self) -> None:
        """A header claiming Shift_JIS over bytes that fail it but are UTF-8 reads as UTF-8."""
        assert decode_body("Ünïcödé ✓".encode(), "shift_jis") == "Ünïcödé ✓"

    def test_unknown_header_charset_is_ignored(self) -> None:
        """An unknown charset label falls through to the next rule."""
        assert decode_body("ça".encode(), "x-bogus") == "ça"


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
