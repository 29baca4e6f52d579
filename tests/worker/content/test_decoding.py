"""Decoding bodies: Encoding Standard labels, BOM first, header over <meta>, bogus labels."""

from __future__ import annotations

import codecs

import pytest
import webencodings

from worker.content.decoding import (
    declared_encoding,
    decode_body,
    encoding_name,
    meta_charset,
    python_codec,
    sniff_bom,
)

#: Text each multi-byte encoding of the Standard can carry.
MULTI_BYTE_SAMPLES = {
    "utf-8": "Grüße, 日本語, привет",
    "big5": "繁體中文的新聞",
    "euc-jp": "日本語の記事です",
    "iso-2022-jp": "日本語の記事です",
    "shift_jis": "日本語の記事です",
    "euc-kr": "한국어 기사입니다",
    "gbk": "简体中文的新闻",
    "gb18030": "简体中文的新闻",
    "utf-16le": "ünïcödé ✓",
    "utf-16be": "ünïcödé ✓",
}
#: Labels the Standard knows that name no encoding we decode with (legacy, for security).
REPLACEMENT_LABELS = ["replacement", "iso-2022-kr", "csiso2022kr", "hz-gb-2312", "iso-2022-cn"]
#: Python codecs that are not text encodings, and labels no standard knows.
BOGUS_LABELS = [
    "rot13",
    "rot_13",
    "base64",
    "base_64",
    "zlib",
    "hex",
    "uu",
    "bz2",
    "quopri",
    "idna",
    "punycode",
    "utf-7",
    "utf-32",
    "unicode_escape",
    "x-bogus",
    "",
    "a" * 200,
]


def sample_for(name: str) -> str:
    """Text that encoding `name` can carry: letters plus every high byte it defines."""
    if name in MULTI_BYTE_SAMPLES:
        return MULTI_BYTE_SAMPLES[name]
    codec = python_codec(name)
    high = []
    for byte in range(0xA0, 0x100):
        try:
            high.append(codec.decode(bytes([byte]), "strict")[0])
        except UnicodeDecodeError:
            continue
    return "Title: " + "".join(high)


def _standard_labels() -> list[tuple[str, str]]:
    return sorted(
        (label, name) for label, name in webencodings.LABELS.items() if name != "replacement"
    )


class TestLabels:
    """Labels map through the Encoding Standard's table, and only through it."""

    @pytest.mark.parametrize(("label", "name"), _standard_labels())
    def test_every_standard_label_decodes(self, label: str, name: str) -> None:
        """Each label names its encoding and decodes text written in it."""
        assert encoding_name(label) == name
        assert encoding_name(f' "{label.upper()}" ') == name
        if name == "x-user-defined":
            assert decode_body(b"ab\x80\xff", label) == "ab\uf780\uf7ff"
            return
        text = sample_for(name)
        body = text.encode(python_codec(name).name)
        assert decode_body(body, label) == text
        assert decode_body(body, label, html=False) == text

    def test_legacy_latin_labels_are_windows_1252(self) -> None:
        """iso-8859-1, latin1, ascii and us-ascii are windows-1252, curly quotes included."""
        for label in ("ISO-8859-1", "latin1", "ascii", "us-ascii", "cp1252", "l1"):
            assert encoding_name(label) == "windows-1252"
        assert (
            decode_body("\u201cÉlève\u201d".encode("cp1252"), "iso-8859-1") == "\u201cÉlève\u201d"
        )

    def test_undefined_windows_1252_bytes_are_c1_controls(self) -> None:
        """0x81, 0x8D, 0x8F, 0x90, 0x9D map to the C1 control of the same number."""
        assert decode_body(b"a\x81b\x9d", "windows-1252") == "a\x81b\x9d"

    @pytest.mark.parametrize("label", BOGUS_LABELS + REPLACEMENT_LABELS)
    def test_bogus_labels_name_nothing(self, label: str) -> None:
        """Non-text codecs, unknown labels and the replacement encoding give None."""
        assert encoding_name(label) is None
        assert encoding_name(None) is None


class TestBogusLabelsFallBack:
    """A bogus label is ignored: never an exception, the body is sniffed instead."""

    @pytest.mark.parametrize("label", BOGUS_LABELS + REPLACEMENT_LABELS)
    def test_in_meta(self, label: str) -> None:
        """`<meta charset="rot13">` over UTF-8 bytes reads as UTF-8."""
        body = f'<html><head><meta charset="{label}"></head><p>Grüße'.encode()
        assert decode_body(body).endswith("<p>Grüße")
        assert meta_charset(body) is None

    @pytest.mark.parametrize("label", BOGUS_LABELS + REPLACEMENT_LABELS)
    def test_in_header(self, label: str) -> None:
        """A bogus header charset falls through to <meta>, then to sniffing."""
        latin = '<meta charset="windows-1251"><p>Привет'.encode("cp1251")
        assert decode_body(latin, label).endswith("<p>Привет")
        assert decode_body("ça".encode(), label) == "ça"

    def test_utf7_is_not_decoded(self) -> None:
        """UTF-7 (not in the Standard, a classic XSS vector) is read as plain bytes."""
        assert decode_body(b"a+ADw-b", "utf-7") == "a+ADw-b"


class TestPrecedence:
    """BOM, then the Content-Type charset, then <meta> (HTML only), then sniffing."""

    @pytest.mark.parametrize(
        ("bom", "codec"),
        [
            (codecs.BOM_UTF8, "utf-8"),
            (codecs.BOM_UTF16_LE, "utf-16-le"),
            (codecs.BOM_UTF16_BE, "utf-16-be"),
            (codecs.BOM_UTF32_LE, "utf-32-le"),
            (codecs.BOM_UTF32_BE, "utf-32-be"),
        ],
    )
    def test_bom_wins_over_header_and_meta(self, bom: bytes, codec: str) -> None:
        """A byte-order mark beats a wrong header and a wrong <meta>; it is not kept."""
        text = '<meta charset="koi8-r"><p>naïve ✓'
        body = bom + text.encode(codec)
        assert sniff_bom(body) == (codec, len(bom))
        assert decode_body(body, "iso-8859-1") == text

    def test_utf32_mark_is_not_read_as_utf16(self) -> None:
        """FF FE 00 00 starts like a UTF-16LE mark but is UTF-32LE."""
        assert decode_body("é".encode("utf-32")) == "é"

    def test_no_bom(self) -> None:
        """Plain bytes have no BOM."""
        assert sniff_bom(b"<html>") == (None, 0)

    def test_header_wins_over_meta(self) -> None:
        """The Content-Type charset beats a contradicting <meta>."""
        body = '<meta charset="windows-1251"><p>Élève'.encode("iso-8859-15")
        assert decode_body(body, "iso-8859-15").endswith("<p>Élève")
        assert declared_encoding(body, "iso-8859-15", html=True) == "iso-8859-15"

    def test_meta_when_the_header_says_nothing(self) -> None:
        """Japanese in Shift_JIS decodes from <meta charset>; http-equiv works too."""
        body = b'<meta charset="shift_jis"><p>' + "日本語の記事".encode("shift_jis")
        assert "日本語の記事" in decode_body(body)
        http_equiv = b'<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">'
        assert meta_charset(http_equiv) == "shift_jis"
        assert meta_charset(b'<meta charset="windows-1251">') == "windows-1251"

    def test_meta_ignored_for_plain_text(self) -> None:
        """Text and caption files do not honour markup declarations."""
        body = b'<meta charset="koi8-r">' + "é".encode()
        assert decode_body(body, html=False).endswith("é")

    @pytest.mark.parametrize(("label", "means"), [("utf-16", "utf-8"), ("utf-16be", "utf-8")])
    def test_meta_claiming_utf16_means_utf8(self, label: str, means: str) -> None:
        """An ASCII-readable <meta> cannot be UTF-16: the page is UTF-8."""
        body = f'<meta charset="{label}"><p>é'.encode()
        assert meta_charset(body) == means
        assert decode_body(body).endswith("<p>é")

    def test_meta_x_user_defined_means_windows_1252(self) -> None:
        """x-user-defined in markup is windows-1252 (HTML's prescan)."""
        body = '<meta charset="x-user-defined"><p>“q”'.encode("cp1252")
        assert meta_charset(body) == "windows-1252"
        assert decode_body(body).endswith("<p>“q”")

    def test_meta_only_near_the_start(self) -> None:
        """A declaration past the scan window is ignored."""
        assert meta_charset(b" " * 5000 + b'<meta charset="koi8-r">') is None


class TestSniffing:
    """Undeclared bodies: UTF-8 when they are UTF-8, else windows-1252."""

    def test_undeclared_utf8(self) -> None:
        assert decode_body("Grüße".encode()) == "Grüße"

    def test_undeclared_legacy_is_windows_1252(self) -> None:
        """Undeclared non-UTF-8 bytes are windows-1252 (curly quotes included)."""
        assert decode_body("“Déjà”".encode("cp1252")) == "“Déjà”"

    def test_undefined_bytes_never_raise(self) -> None:
        """Bytes windows-1252 leaves undefined still decode."""
        assert decode_body(b"a\x81b") == "a\x81b"

    def test_utf8_cut_inside_a_character_stays_utf8(self) -> None:
        """A body cut at the byte bound mid-character is still read as UTF-8."""
        body = "Grüße, 日本".encode()[:-1]
        assert decode_body(body) == "Grüße, 日\ufffd"

    def test_wrong_header_over_utf8_is_read_as_utf8(self) -> None:
        """A header claiming Shift_JIS over bytes that fail it but are UTF-8 reads as UTF-8."""
        assert decode_body("Ünïcödé ✓".encode(), "shift_jis") == "Ünïcödé ✓"

    def test_declared_utf8_with_bad_bytes_keeps_utf8(self) -> None:
        """Declared UTF-8 with a stray byte stays UTF-8, the byte replaced."""
        assert decode_body(b"caf\xc3\xa9 \xff ok", "utf-8") == "café \ufffd ok"
