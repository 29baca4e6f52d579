"""Media types and binary bodies: the WHATWG MIME Sniffing rules the fetcher applies."""

from __future__ import annotations

import codecs
import random

import pytest

from worker.domain.reasons import Reason
from worker.fetch.media import (
    ALLOWED_MIME_TYPES,
    SNIFF_BYTES,
    looks_binary,
    media_type,
    sniff_text_type,
)
from worker.fetch.types import FetchFailure

#: The MIME Sniffing standard's binary data bytes.
BINARY_DATA_BYTES = [*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)]
#: C0 controls that text does hold: TAB, LF, FF, CR, ESC (ISO-2022-JP).
TEXT_CONTROLS = [0x09, 0x0A, 0x0C, 0x0D, 0x1B]
#: 4 096 random bytes, as in the report that found them answered as text.
RANDOM = random.Random(4096).randbytes(4096)
#: Random bytes with every NUL replaced: only the other binary data bytes give them away.
RANDOM_NO_NUL = RANDOM.replace(b"\x00", b"\x01")
PROSE = "Researchers measured forty mountain lakes — grüße, 日本語.\n"
WIDE = [
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
]


def refused(declared: str | None, body: bytes, path: str = "/x") -> FetchFailure:
    with pytest.raises(FetchFailure) as caught:
        media_type(declared, body, path)
    assert caught.value.reason is Reason.UNSUPPORTED_MEDIA
    return caught.value


class TestBinaryDataBytes:
    """One binary data byte in the first 1 445 bytes makes a body binary."""

    @pytest.mark.parametrize("byte", BINARY_DATA_BYTES, ids=hex)
    def test_each_binary_data_byte(self, byte: int) -> None:
        assert looks_binary(b"plain words " + bytes([byte]) + b" more words")

    @pytest.mark.parametrize("byte", TEXT_CONTROLS, ids=hex)
    def test_text_controls_are_text(self, byte: int) -> None:
        assert not looks_binary(b"plain words " + bytes([byte]) + b" more words")

    def test_only_the_resource_header_counts(self) -> None:
        """A binary data byte past the first 1 445 bytes is not looked at."""
        assert SNIFF_BYTES == 1445
        assert looks_binary(b"a" * 1444 + b"\x01")
        assert not looks_binary(b"a" * 1445 + b"\x01")

    def test_random_bytes(self) -> None:
        """Random bytes are binary, with or without NULs."""
        assert looks_binary(RANDOM)
        assert looks_binary(RANDOM_NO_NUL)

    def test_high_bytes_alone_are_text(self) -> None:
        """Bytes 0x80-0xFF are legacy text (windows-1252, Shift_JIS...), not binary."""
        assert not looks_binary("“Déjà vu” — Ünïcödé".encode("cp1252"))
        assert not looks_binary("日本語の記事".encode("shift_jis"))

    def test_utf8_bom_does_not_excuse_binary(self) -> None:
        """A UTF-8 mark in front of binary data bytes is still binary."""
        assert looks_binary(codecs.BOM_UTF8 + RANDOM_NO_NUL)


class TestWideText:
    """UTF-16 and UTF-32 text after its BOM is text, judged by its characters."""

    @pytest.mark.parametrize(("bom", "codec"), WIDE, ids=[c for _, c in WIDE])
    def test_bom_prefixed_text_is_text(self, bom: bytes, codec: str) -> None:
        body = bom + (PROSE * 100).encode(codec)
        assert not looks_binary(body)
        assert media_type("text/plain", body, "/notes") == "text/plain"
        assert sniff_text_type(body, "/notes") == "text/plain"

    @pytest.mark.parametrize(("bom", "codec"), WIDE, ids=[c for _, c in WIDE])
    def test_bom_prefixed_binary_is_binary(self, bom: bytes, codec: str) -> None:
        """A BOM in front of random bytes, or of text with a control character, is binary."""
        assert looks_binary(bom + RANDOM)
        assert looks_binary(bom + "a\x01b".encode(codec))

    def test_cut_inside_a_surrogate_pair(self) -> None:
        """The 1 445-byte header may end inside a character: that is still text."""
        assert not looks_binary(codecs.BOM_UTF16_LE + ("𝄞" * 1000).encode("utf-16-le"))

    def test_wide_captions_are_sniffed(self) -> None:
        """An undeclared UTF-16 WebVTT file is sniffed as WebVTT."""
        body = codecs.BOM_UTF16_LE + "WEBVTT\n\n00:01.000 --> 00:02.000\nHi\n".encode("utf-16-le")
        assert sniff_text_type(body, "/captions") == "text/vtt"


class TestDeclaredTypes:
    """Only the output schema's media types are taken; binary bodies never are."""

    @pytest.mark.parametrize(
        "declared",
        ["application/octet-stream", "binary/octet-stream", "image/png", "application/json"],
    )
    def test_types_outside_the_schema(self, declared: str) -> None:
        """A type outside the schema's enum is refused even for a plain WebVTT body."""
        refused(declared, b"WEBVTT\n\n00:01.000 --> 00:02.000\nHi\n", "/c.vtt")

    @pytest.mark.parametrize("declared", sorted(ALLOWED_MIME_TYPES) + [None])
    def test_binary_whatever_the_label(self, declared: str | None) -> None:
        """Random bytes are refused under every accepted type, and with none."""
        refused(declared, RANDOM)
        refused(declared, RANDOM_NO_NUL)

    @pytest.mark.parametrize("declared", sorted(ALLOWED_MIME_TYPES))
    def test_text_keeps_its_declared_type(self, declared: str) -> None:
        assert media_type(declared, PROSE.encode(), "/x") == declared

    @pytest.mark.parametrize(
        ("body", "path", "expected"),
        [
            (b"<!DOCTYPE html><html></html>", "/a", "text/html"),
            (b"WEBVTT\n\n00:00.000 --> 00:01.000\nhi\n", "/a", "text/vtt"),
            (b"1\n00:00:01,000 --> 00:00:02,000\nhi\n", "/a", "application/x-subrip"),
            (b"just some words", "/a", "text/plain"),
            (b"1\n", "/cap.srt", "application/x-subrip"),
        ],
    )
    def test_no_type_is_sniffed(self, body: bytes, path: str, expected: str) -> None:
        """Only a body served without any Content-Type is sniffed."""
        assert media_type(None, body, path) == expected


class TestWebVTTNul:
    """The WebVTT parser turns NUL into U+FFFD: NUL alone does not make WebVTT binary."""

    NUL_VTT = b"WEBVTT\n\n00:01.000 --> 00:02.000\nsilence\x00here\n"

    @pytest.mark.parametrize("body", [NUL_VTT, b"\xef\xbb\xbf" + NUL_VTT])
    def test_nul_in_webvtt_is_text(self, body: bytes) -> None:
        """Served as text/vtt, or undeclared with the signature, a NUL is text."""
        assert media_type("text/vtt", body, "/c.vtt") == "text/vtt"
        assert media_type(None, body, "/c") == "text/vtt"

    def test_other_binary_bytes_in_webvtt_are_binary(self) -> None:
        """Any other binary data byte still refuses a WebVTT body."""
        refused("text/vtt", self.NUL_VTT.replace(b"\x00", b"\x01"))
        refused("text/vtt", b"WEBVTT\n\n" + RANDOM_NO_NUL)

    @pytest.mark.parametrize("declared", ["text/plain", "application/x-subrip", "text/html"])
    def test_nul_elsewhere_is_binary(self, declared: str) -> None:
        """Other types keep the MIME Sniffing rule: NUL is a binary data byte."""
        refused(declared, self.NUL_VTT)
        assert looks_binary(self.NUL_VTT)


class TestWebVTTControls:
    """Vertical tab (a binary data byte) and form feed (text) in WebVTT bodies.

    The WebVTT parser reads both: FF is whitespace around the timings' arrow, VT an ordinary
    character (a timings line holding one is dropped, the file is kept). Browsers load such
    files (web-platform-tests' whitespace-chars and regions-id), so both are text in WebVTT.
    """

    VT_VTT = (
        b"WEBVTT\n\n00:01.000\x0b-->\x0b00:02.000\nlost\n\n"
        b"00:03.000 --> 00:04.000 region:\x0b\nhi\n"
    )
    FF_VTT = b"WEBVTT\n\n\x0c00:01.000\x0c-->\x0c00:02.000\x0c\nhi\n"
    #: The binary data bytes WebVTT still refuses: all but NUL and VT.
    WEBVTT_BINARY = [b for b in BINARY_DATA_BYTES if b not in (0x00, 0x0B)]

    @pytest.mark.parametrize(
        "body", [VT_VTT, FF_VTT, b"\xef\xbb\xbf" + VT_VTT], ids=["vt", "ff", "bom-vt"]
    )
    def test_vt_and_ff_in_webvtt_are_text(self, body: bytes) -> None:
        """Served as text/vtt, or undeclared with the signature, VT and FF are text."""
        assert not looks_binary(body, webvtt=True)
        assert media_type("text/vtt", body, "/c.vtt") == "text/vtt"
        assert media_type(None, body, "/c") == "text/vtt"

    @pytest.mark.parametrize("declared", ["text/plain", "application/x-subrip", "text/html"])
    def test_vt_elsewhere_is_binary(self, declared: str) -> None:
        """Other types keep the MIME Sniffing rule: VT is a binary data byte, FF is not."""
        refused(declared, self.VT_VTT)
        assert media_type(declared, self.FF_VTT, "/c") == declared

    def test_vt_without_the_signature_is_binary(self) -> None:
        """Undeclared and without the WebVTT signature, VT is binary as for any text."""
        refused(None, self.VT_VTT.removeprefix(b"WEBVTT"))

    @pytest.mark.parametrize("byte", WEBVTT_BINARY, ids=hex)
    def test_other_binary_data_bytes_still_refuse_webvtt(self, byte: int) -> None:
        """Each other binary data byte still makes a WebVTT body binary."""
        body = self.VT_VTT.replace(b"lost", b"lo" + bytes([byte]) + b"st")
        assert looks_binary(body, webvtt=True)
        refused("text/vtt", body)

    @pytest.mark.parametrize(("bom", "codec"), WIDE, ids=[c for _, c in WIDE])
    def test_wide_webvtt_judged_alike(self, bom: bytes, codec: str) -> None:
        """After a UTF-16/32 mark the same characters decide: VT and NUL are WebVTT text."""
        text = "WEBVTT\n\n00:01.000 --> 00:02.000 region:\x0b\nsilence\x00here\n"
        body = bom + text.encode(codec)
        assert not looks_binary(body, webvtt=True)
        assert looks_binary(body)
        assert looks_binary(bom + text.replace("\x0b", "\x01").encode(codec), webvtt=True)
