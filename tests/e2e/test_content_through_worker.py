"""Every content rule of url_text and published_captions, through the real service.

Each case is POSTed to the API, processed by the session's real Celery worker (a subprocess)
fetching from the loopback HTTPS site, and polled until it settles; every payload is checked
against the output schema by the `Api` client. All cases are submitted first and then awaited,
so the worker's two processes run them in parallel.
"""

from __future__ import annotations

import codecs
import random
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Env, Services
from tests.support.factories import Api, body, make_key
from tests.support.hostile import compression_bomb, rate_limited, redirect
from tests.support.tls_site import TLSSite

pytestmark = [pytest.mark.usefixtures("services")]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PAGES = FIXTURES / "pages"
CAPTIONS = FIXTURES / "captions"
P = "/ct"
SRT = "application/x-subrip"
VTT = "text/vtt; charset=utf-8"
#: Marks a case whose source_url is the URL it asked for.
SAME = "<same>"
#: Characters untrusted text must never carry through: controls, zero-width, bidi, BOM.
INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
#: Captions keep the bidi marks (LRM, RLM): mixed-direction cues need them to show right.
CAPTION_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f\u200b-\u200d\u202a-\u202e\u2066-\u2069\ufeff]"
)
#: A WebVTT file with a NUL, the LRM/RLM references and bidi controls in its cue text.
NUL_BIDI_VTT = (
    "WEBVTT\n\n00:01.000 --> 00:02.000\nsilence\x00here\n\n"
    "00:02.000 --> 00:03.000\n&lrm;(1)&rlm; \u202bshalom\u202c \u2067x\u2069\n"
).encode()

LONG_TITLE = " ".join(["Meadow"] * 60)
#: A binary data byte (here BEL) in a body's first 1 445 bytes makes it binary (MIME
#: Sniffing), so the page below keeps its control characters past a comment that long.
SNIFF_PADDING = "<!--" + " " * 1_445 + "-->"
UNTRUSTED_HEAD = "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
UNTRUSTED_PAGE = (
    f"{UNTRUSTED_HEAD}{SNIFF_PADDING}"
    "<title>Bridges\u200b\u202e of\x07 the\u2066 Rhine\u2069</title>"
    "<meta name='description' content='Nine\u200d crossings\x1b in\ufeff one city.'></head>"
    "<body><article><h1>Bridges of the Rhine</h1>"
    "<p>The old\u200b stone\u00a0bridge\x07 was rebuilt\u202e in 1952\u202c after the war,"
    " and the\ufeff ferry\x1b[31m that replaced it\u2067 for seven years\u2069 was retired.</p>"
    "<p>Engineers\u200c now inspect every span\x7f twice a year, looking for cracks in the"
    " piers and for scour around the foundations after the spring floods.</p>"
    "<p>Residents say\u2028the crossings define the city more than its cathedral does, and"
    " the council has promised to keep all nine open to pedestrians.</p>"
    "</article></body></html>"
)
GERMAN_PAGE = (
    "<!doctype html><html><head><meta charset='utf-8'><title>Hochwasser an der Mosel</title>"
    "</head><body><article><h1>Hochwasser an der Mosel</h1>"
    "<p>Nach tagelangem Regen ist die Mosel in Trier über die Ufer getreten und hat mehrere"
    " Uferstraßen überflutet, die Feuerwehr war die ganze Nacht im Einsatz.</p>"
    "<p>Die Stadtverwaltung rechnet damit, dass der Pegel erst am Wochenende wieder sinkt, und"
    " bittet die Anwohner, Keller und Tiefgaragen vorsorglich zu räumen.</p>"
    "</article></body></html>"
)
UNDECLARED_PAGE = GERMAN_PAGE.replace("Hochwasser an der Mosel", "Pegelstand Mosel")
PARAGRAPH = (
    "Researchers measured the water quality of forty mountain lakes over three summers,"
    " sampling at dawn and at dusk to capture the daily swing in dissolved oxygen."
)


def _article(title: str, paragraphs: list[str], head: str = "", lang: str = "en") -> str:
    inner = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        f"<!doctype html><html lang='{lang}'><head><meta charset='utf-8'><title>{title}</title>"
        f"{head}</head><body><nav><a href='/'>Home</a> <a href='/about'>About</a></nav>"
        f"<article><h1>{title}</h1>{inner}</article><footer>Copyright Example Lakes</footer>"
        "</body></html>"
    )


LONG_WORDS = [f"lake{i}" for i in range(4_000)]
LONG_PAGE = _article(
    "A very long report",
    [" ".join(LONG_WORDS[i : i + 40]) + "." for i in range(0, len(LONG_WORDS), 40)],
)
#: 300 000 list items: cut at the element bound before lxml or trafilatura see them.
FLAT_BOMB = "<html lang='en'><body><ul>" + "<li>word" * 300_000 + "</ul></body></html>"
DEPTH_BOMB = _article("Deep page", [PARAGRAPH] * 4).replace(
    "</article>", "</article>" + "<div>" * 5_000 + "x" + "</div>" * 5_000
)
PAYWALL_PAGE = (
    "<!doctype html><html lang='en'><head><title>Premium: the lake report</title></head><body>"
    "<article><h1>The lake report</h1><p>The first lines of the story are free.</p>"
    "<div class='paywall'><p>Subscribe to keep reading.</p></div></article></body></html>"
)
OG_PAGE = _article(
    "Lakes at dawn",
    [PARAGRAPH] * 3,
    head="<meta name='description' content='Plain meta description.'>"
    "<meta property='og:description' content='OpenGraph wins over meta.'>",
)
NO_DEFAULT_TRACKS = (
    "<!doctype html><html lang='en'><head><title>Two tracks</title></head><body><video>"
    f"<track kind='subtitles' srclang='fr' src='{P}/captions/styled_fr.vtt'>"
    f"<track kind='captions' srclang='en' src='{P}/captions/styled.vtt'>"
    "</video></body></html>"
)
SRCLANG_TRACK = (
    "<!doctype html><html lang='en'><head><title>A French story</title></head><body><video>"
    f"<track kind='subtitles' srclang='fr' src='{P}/captions/story_fr.srt'>"
    "</video></body></html>"
)
CP1252_SRT = (
    "1\r\n00:00:01,000 --> 00:00:02,500\r\nLa forêt était très sombre.\r\n\r\n"
    "2\r\n00:00:03,000 --> 00:00:04,000\r\nÀ bientôt, Zoë !\r\n"
).encode("cp1252")
MANY_CUES = "".join(
    f"{i + 1}\n00:{i // 60:02d}:{i % 60:02d},000 --> "
    f"00:{i // 60:02d}:{i % 60:02d},900\nline {i}\n\n"
    for i in range(1_500)
)
# Charsets that are no text encoding, declared where only a decoder would trip on them.
ROT13_PAGE = _article("Charset rot13", [PARAGRAPH] * 3, head="<meta charset='rot13'>").replace(
    "<meta charset='utf-8'>", ""
)
BASE64_PAGE = _article(
    "Charset base64",
    [PARAGRAPH] * 3,
    head="<meta http-equiv='Content-Type' content='text/html; charset=base64'>",
).replace("<meta charset='utf-8'>", "")
HEX_TRACK_PAGE = (
    "<!doctype html><html lang='en'><head><meta charset='hex'><title>Hex talk</title></head>"
    f"<body><video><track kind='captions' srclang='en' src='{P}/captions/styled.vtt'>"
    "</video></body></html>"
)
#: An image URL urllib refuses ("Invalid IPv6 URL"): no image, and the page is still read.
BROKEN_IMAGE_PAGE = _article(
    "Broken figure",
    [PARAGRAPH] * 3,
    head="<meta property='og:image' content='https://[oops/og.png'>",
).replace("<article>", "<article><figure><img src='https://[::1/a.png'></figure>")
OCTET_TRACK_PAGE = (
    "<!doctype html><html lang='en'><head><title>Octet talk</title></head><body><video>"
    f"<track kind='captions' srclang='en' src='{P}/captions/octet.vtt'></video></body></html>"
)
#: 4 096 random bytes without a NUL: only the other binary data bytes give them away.
RANDOM_BYTES = random.Random(4096).randbytes(4096).replace(b"\x00", b"\x01")
WIDE_TEXT = "Plain notes in UTF-16.\n\nSecond paragraph, grüße."
STYLED_FIRST = {
    "start_ms": 500,
    "end_ms": 3000,
    "text": "Good morning & welcome to Rivers of Europe.",
}


def _mount(site: TLSSite) -> None:
    """Serve every page and caption file of the cases under /ct/."""
    page, add = site.page, site.add
    read = lambda name: (PAGES / name).read_bytes()  # noqa: E731
    page(f"{P}/en", read("article_en_bom.html"), "text/html")
    page(f"{P}/fr", read("article_fr_latin1.html"), "text/html; charset=ISO-8859-1")
    page(f"{P}/ja", read("article_ja_sjis.html"), "text/html")
    page(f"{P}/ru", read("article_ru_cp1251.html"), "text/html; charset=windows-1251")
    page(f"{P}/long-title", _article(LONG_TITLE, [PARAGRAPH] * 3))
    page(f"{P}/og", OG_PAGE)
    page(f"{P}/de-header", GERMAN_PAGE, headers={"Content-Language": "de-AT"})
    page(f"{P}/undeclared", UNDECLARED_PAGE)
    page(f"{P}/long", LONG_PAGE)
    page(f"{P}/long.txt", " ".join(LONG_WORDS * 2), "text/plain")
    page(f"{P}/flat-bomb", FLAT_BOMB)
    page(f"{P}/depth-bomb", DEPTH_BOMB)
    page(f"{P}/gallery", read("metadata_only.html"))
    page(f"{P}/blank", b"<html><body></body></html>")
    page(f"{P}/login-page", read("login.html"))
    page(f"{P}/account/login", read("login.html"))
    add(f"{P}/members/story", redirect(f"{P}/account/login?next=/members"))
    page(f"{P}/paywall", PAYWALL_PAGE)
    page(f"{P}/untrusted", UNTRUSTED_PAGE.encode())
    page(f"{P}/controls-up-front", UNTRUSTED_PAGE.replace(SNIFF_PADDING, "").encode())
    page(f"{P}/notes.txt", "Plain\u200b notes.\r\n\r\n\r\nSecond   paragraph.", "text/plain")
    tracks = read("video_tracks.html").replace(b'src="/captions/', f'src="{P}/captions/'.encode())
    page(f"{P}/talks/rivers", tracks)
    page(f"{P}/talks/two", NO_DEFAULT_TRACKS)
    page(f"{P}/talks/story", SRCLANG_TRACK)
    page(f"{P}/talks/silent", read("video_no_track.html"))
    for name in ("styled", "styled_fr", "broken_crlf_bom", "rolling_auto", "unparsable", "empty"):
        page(f"{P}/captions/{name}.vtt", (CAPTIONS / f"{name}.vtt").read_bytes(), VTT)
    story = (CAPTIONS / "story_fr.srt").read_bytes()
    page(f"{P}/captions/story_fr.srt", story, SRT)
    page(f"{P}/captions/plain-captions.txt", story, "text/plain")
    page(f"{P}/captions/download.vtt", (CAPTIONS / "styled.vtt").read_bytes(), "")
    page(f"{P}/captions/cp1252.srt", CP1252_SRT, f"{SRT}; charset=windows-1252")
    page(f"{P}/captions/many.srt", MANY_CUES, SRT)
    page(f"{P}/captions/regions.vtt", (CAPTIONS / "regions.vtt").read_bytes(), VTT)
    page(f"{P}/captions/lost_cue.srt", (CAPTIONS / "subrip_lost_cue.srt").read_bytes(), SRT)
    page(f"{P}/captions/nul_bidi.vtt", NUL_BIDI_VTT, VTT)
    page(f"{P}/captions/nul_bidi_undeclared.vtt", NUL_BIDI_VTT, "")
    page(f"{P}/captions/newline-first.vtt", b"\nWEBVTT\n\n00:01.000 --> 00:02.000\nhi\n", VTT)
    page(
        f"{P}/captions/bom-text.vtt", b"\xef\xbb\xbfx WEBVTT\n\n00:01.000 --> 00:02.000\nhi\n", VTT
    )
    page(f"{P}/captions/empty-file.vtt", b"", VTT)
    page(f"{P}/readme.txt", "Just a readme, no cues here.", "text/plain")
    # Charsets that are no text encoding, and URLs urllib refuses.
    page(f"{P}/rot13", ROT13_PAGE, "text/html")
    page(f"{P}/base64", BASE64_PAGE, "text/html")
    page(f"{P}/talks/hex", HEX_TRACK_PAGE, "text/html")
    page(f"{P}/broken-image", BROKEN_IMAGE_PAGE)
    # Media outside the schema's types, and binary bodies whatever their label.
    page(f"{P}/octet.txt", "Plain notes.\n\nSecond paragraph.", "application/octet-stream")
    styled = (CAPTIONS / "styled.vtt").read_bytes()
    page(f"{P}/captions/octet.vtt", styled, "application/octet-stream")
    page(f"{P}/talks/octet", OCTET_TRACK_PAGE)
    page(f"{P}/random.txt", RANDOM_BYTES, "text/plain")
    page(f"{P}/random.vtt", b"WEBVTT\n\n" + RANDOM_BYTES, "text/vtt")
    page(f"{P}/utf16.txt", codecs.BOM_UTF16_LE + WIDE_TEXT.encode("utf-16-le"), "text/plain")
    page(f"{P}/utf32.txt", codecs.BOM_UTF32_BE + WIDE_TEXT.encode("utf-32-be"), "text/plain")
    # The guard.
    add(f"{P}/to-other-loopback", redirect(f"https://127.0.0.2:{site.port}/"))
    add(f"{P}/slow-down", rate_limited("120"))


@dataclass(frozen=True)
class Case:
    """One rule: what to ask for, and exactly what the settled result must say."""

    id: str
    path: str
    kind: str = "url_text"
    language: str | None = None
    status: str = "ready"
    reason: str | None = None
    warnings: tuple[str, ...] = ()
    content_kind: str = "document_text"
    caption_format: str | None = None
    mime_type: str | None = "text/html"
    #: The provenance language; its source is publisher_declared exactly when it is set.
    declared: str | None = None
    #: The expected source_url: SAME (the asked URL), a path on the site, or None.
    source: str | None = SAME
    contains: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    text: str | None = None
    check: Callable[[dict[str, Any]], None] | None = None
    #: CPU-heavy: run after the parallel batch, with the worker to itself.
    alone: bool = False


def _title_bounded(result: dict[str, Any]) -> None:
    title = result["title"]
    assert 0 < len(title) <= 200 and LONG_TITLE.startswith(title), title
    assert not title.endswith(" ")


def _cut_at_word(result: dict[str, Any]) -> None:
    text = result["text"]
    assert 19_000 < len(text) <= 20_000
    assert text.split()[-1].rstrip(".") in LONG_WORDS
    heading, _, rest = text.partition("\n")
    assert heading == "A very long report"
    words = rest.replace("\n", " ").replace(".", "").split()
    assert words == LONG_WORDS[: len(words)]


def _plain_cut_at_word(result: dict[str, Any]) -> None:
    text = result["text"]
    assert 19_000 < len(text) <= 20_000
    assert " ".join(LONG_WORDS * 2).startswith(text + " ")


def _flat_bomb(result: dict[str, Any]) -> None:
    assert len(result["text"]) <= 20_000
    assert set(result["text"].replace("-", " ").split()) == {"word"}


def _metadata(result: dict[str, Any]) -> None:
    assert result["title"] == "Photo gallery: spring"
    assert result["description"] == "Twenty photographs of the first spring blossoms."


def _og_description(result: dict[str, Any]) -> None:
    assert result["description"] == "OpenGraph wins over meta."
    assert result["title"] == "Lakes at dawn"


def _clean(result: dict[str, Any]) -> None:
    for value in (result["text"], result["title"], result["description"]):
        assert not INVISIBLE.search(value), repr(value)
    assert result["title"] == "Bridges of the Rhine"
    assert result["description"] == "Nine crossings in one city."


def _article_metadata(title: str) -> Callable[[dict[str, Any]], None]:
    def check(result: dict[str, Any]) -> None:
        assert result["title"] == title and result["description"]
        assert "\ufeff" not in result["text"] and "Advertisement" not in result["text"]

    return check


def _styled(result: dict[str, Any]) -> None:
    segments = result["segments"]
    assert segments[0] == STYLED_FIRST
    assert segments[1]["text"] == "Today we follow the Danube from the Black Forest to the sea."
    assert segments[2]["text"] == "Ten countries share its basin — more than any other river."
    assert segments[3] == {"start_ms": 9600, "end_ms": 12000, "text": "[applause]"}
    assert len(segments) == 4
    assert result["text"] == "\n".join(s["text"] for s in segments)


def _broken(result: dict[str, Any]) -> None:
    assert [(s["start_ms"], s["end_ms"]) for s in result["segments"]] == [
        (1000, 4000),
        (2000, 3500),
        (10000, 12000),
    ]


def _subrip(result: dict[str, Any]) -> None:
    assert result["segments"] == [
        {"start_ms": 1000, "end_ms": 3200, "text": "Il était une fois une rivière."},
        {"start_ms": 3500, "end_ms": 6000, "text": "Elle traversait la forêt & la plaine."},
        {"start_ms": 6500, "end_ms": 8000, "text": "Fin."},
    ]


def _thousand_cues(result: dict[str, Any]) -> None:
    segments = result["segments"]
    assert len(segments) == 1_000
    assert segments[0] == {"start_ms": 0, "end_ms": 900, "text": "line 0"}
    assert segments[-1]["text"] == "line 999"


def _rolling(result: dict[str, Any]) -> None:
    """Segments keep each cue's own text and timing; only the text drops the repeats."""
    assert [(s["start_ms"], s["end_ms"], s["text"]) for s in result["segments"]] == [
        (0, 2340, "hello everyone welcome"),
        (2340, 2350, "hello everyone welcome"),
        (2350, 5000, "hello everyone welcome to the channel"),
        (5000, 5010, "to the channel"),
        (5010, 7000, "to the channel today we talk about rivers"),
    ]


def _regions(result: dict[str, Any]) -> None:
    """Every cue after the REGION and STYLE blocks is kept, in order."""
    assert [(s["start_ms"], s["text"]) for s in result["segments"]] == [
        (0, "Hi, my name is Fred"),
        (2500, "Hi, I’m Bill"),
        (5000, "Would you like to get a coffee?"),
        (7500, "Sure! I’ve only had one today."),
        (10000, "This is my fourth!"),
        (12500, "OK, let’s go."),
    ]


def _subrip_every_cue(result: dict[str, Any]) -> None:
    """No cue lost part-way through: later segments keep their own start times."""
    assert [s["start_ms"] for s in result["segments"]] == [
        1000,
        2500,
        4500,
        6000,
        7500,
        9500,
        12500,
    ]
    assert result["segments"][4]["text"] == "from 1984 1985"


def _french_first(result: dict[str, Any]) -> None:
    assert result["segments"][0]["text"] == "Bonjour & welcome to Rivers of Europe."


def _no_content(result: dict[str, Any]) -> None:
    assert result["segments"] == [] and result["title"] is None


ARTICLES = [
    Case(
        "html-utf8-bom-en-gb",
        f"{P}/en",
        declared="en-GB",
        contains=("Ecologists say the meadows support far more pollinators",),
        absent=("Love this", "Top ten gadgets"),
        check=_article_metadata("Wildflower meadows return to city parks"),
    ),
    Case(
        "html-latin1-fr",
        f"{P}/fr",
        declared="fr-FR",
        contains=("« Nos élèves méritent des salles de classe",),
        absent=("Mentions légales",),
    ),
    Case(
        "html-shift-jis-ja",
        f"{P}/ja",
        declared="ja",
        contains=("京都市内の紅葉は、今年は例年よりも一週間ほど遅れて",),
        absent=("著作権",),
    ),
    Case(
        "html-cp1251-ru",
        f"{P}/ru",
        declared="ru",
        contains=("В Казани в субботу открыли движение по новому мосту",),
        absent=("Все права",),
    ),
]

URL_TEXT = [
    *ARTICLES,
    Case("title-bounded-200", f"{P}/long-title", declared="en", check=_title_bounded),
    Case("description-opengraph", f"{P}/og", declared="en", check=_og_description),
    Case(
        "language-from-content-language",
        f"{P}/de-header",
        declared="de-AT",
        contains=("die Feuerwehr war die ganze Nacht im Einsatz",),
    ),
    Case("language-undeclared", f"{P}/undeclared", contains=("Pegel",)),
    Case(
        "text-limited-html",
        f"{P}/long",
        status="partial",
        reason="text_limited",
        declared="en",
        check=_cut_at_word,
    ),
    Case(
        "text-limited-plain",
        f"{P}/long.txt",
        status="partial",
        reason="text_limited",
        mime_type="text/plain",
        check=_plain_cut_at_word,
    ),
    Case(
        "nodes-limited-flat",
        f"{P}/flat-bomb",
        status="partial",
        reason="nodes_limited",
        warnings=("text_limited",),
        declared="en",
        check=_flat_bomb,
        alone=True,
    ),
    Case(
        "nodes-limited-depth",
        f"{P}/depth-bomb",
        status="partial",
        reason="nodes_limited",
        declared="en",
        contains=(PARAGRAPH,),
    ),
    Case(
        "metadata-only",
        f"{P}/gallery",
        status="partial",
        reason="metadata_only",
        content_kind="metadata_only",
        declared="en",
        text="",
        check=_metadata,
    ),
    Case(
        "nothing-no-text",
        f"{P}/blank",
        status="empty",
        reason="no_text",
        content_kind="none",
        text="",
        check=_no_content,
    ),
    Case(
        "login-form",
        f"{P}/login-page",
        status="blocked",
        reason="login_required",
        content_kind="none",
        declared="en",
        text="",
    ),
    Case(
        "redirect-to-login",
        f"{P}/members/story",
        status="blocked",
        reason="login_required",
        content_kind="none",
        declared="en",
        source=f"{P}/account/login?next=/members",
        text="",
    ),
    Case(
        "paywall",
        f"{P}/paywall",
        status="blocked",
        reason="login_required",
        content_kind="none",
        declared="en",
        text="",
    ),
    Case(
        "language-mismatch",
        f"{P}/fr",
        language="de",
        status="partial",
        reason="language_mismatch",
        declared="fr-FR",
        contains=("Besançon",),
    ),
    Case(
        "en-gb-matches-en",
        f"{P}/en",
        language="en",
        declared="en-GB",
        contains=("Ecologists say",),
    ),
    Case(
        "untrusted-text-cleaned",
        f"{P}/untrusted",
        declared="en",
        contains=(
            "The old stone bridge was rebuilt in 1952 after the war",
            "Engineers now inspect every span twice a year",
        ),
        check=_clean,
    ),
    Case(
        "plain-text-cleaned",
        f"{P}/notes.txt",
        mime_type="text/plain",
        text="Plain notes.\n\nSecond paragraph.",
    ),
    Case("meta-charset-rot13", f"{P}/rot13", declared="en", contains=(PARAGRAPH,)),
    Case("http-equiv-charset-base64", f"{P}/base64", declared="en", contains=(PARAGRAPH,)),
    Case("image-url-urllib-refuses", f"{P}/broken-image", declared="en", contains=(PARAGRAPH,)),
    Case("utf16-bom-text", f"{P}/utf16.txt", mime_type="text/plain", text=WIDE_TEXT),
    Case("utf32-bom-text", f"{P}/utf32.txt", mime_type="text/plain", text=WIDE_TEXT),
    *[
        Case(
            case_id,
            path,
            status="unsupported",
            reason="unsupported_media",
            content_kind="none",
            mime_type=None,
            text="",
        )
        for case_id, path in [
            ("control-bytes-up-front", f"{P}/controls-up-front"),
            ("octet-stream-text", f"{P}/octet.txt"),
            ("random-bytes-as-text-plain", f"{P}/random.txt"),
        ]
    ],
]


def _captions(case_id: str, path: str, **fields: Any) -> Case:
    """A published_captions case: a caption file unless the fields say otherwise."""
    defaults: dict[str, Any] = {
        "kind": "published_captions",
        "content_kind": "published_caption_file",
        "mime_type": "text/vtt",
        "caption_format": "webvtt",
    }
    return Case(case_id, path, **{**defaults, **fields})


CAPTION_CASES = [
    _captions(
        "webvtt-styled-voices-entities",
        f"{P}/captions/styled.vtt",
        language="en",
        declared="en",
        absent=("<", "&amp;", "&mdash;", "Ada Byrne", "::cue", "NOTE", "intro"),
        check=_styled,
    ),
    _captions(
        "webvtt-language-header",
        f"{P}/captions/styled_fr.vtt",
        declared="fr",
        check=_french_first,
    ),
    _captions(
        "subrip-by-content-type-bom-crlf",
        f"{P}/captions/story_fr.srt",
        caption_format="subrip",
        mime_type=SRT,
        check=_subrip,
    ),
    _captions(
        "subrip-sniffed-from-text-plain",
        f"{P}/captions/plain-captions.txt",
        caption_format="subrip",
        mime_type="text/plain",
        check=_subrip,
    ),
    _captions(
        "webvtt-by-extension-undeclared-type",
        f"{P}/captions/download.vtt",
        declared="en",
        check=_styled,
    ),
    _captions(
        "subrip-windows-1252",
        f"{P}/captions/cp1252.srt",
        caption_format="subrip",
        mime_type=SRT,
        text="La forêt était très sombre.\nÀ bientôt, Zoë !",
    ),
    _captions(
        "cues-limited",
        f"{P}/captions/many.srt",
        status="partial",
        reason="cues_limited",
        caption_format="subrip",
        mime_type=SRT,
        check=_thousand_cues,
    ),
    _captions(
        "invalid-cues-overlap-bom-crlf",
        f"{P}/captions/broken_crlf_bom.vtt",
        status="partial",
        reason="invalid_cues",
        text="Welcome back to the programme.\nThanks for having me.\n"
        "Let us talk about tides & currents.",
        check=_broken,
    ),
    _captions(
        "unparsable-invalid-captions",
        f"{P}/captions/unparsable.vtt",
        status="unsupported",
        reason="invalid_captions",
        content_kind="none",
        text="",
        check=_no_content,
    ),
    _captions(
        "no-cue-no-captions",
        f"{P}/captions/empty.vtt",
        status="empty",
        reason="no_captions",
        content_kind="none",
        text="",
    ),
    _captions(
        "rolling-auto-captions-collapsed",
        f"{P}/captions/rolling_auto.vtt",
        declared="en",
        text="hello everyone welcome\nto the channel\ntoday we talk about rivers",
        check=_rolling,
    ),
    _captions(
        "webvtt-regions-and-styles-keep-every-cue",
        f"{P}/captions/regions.vtt",
        declared="en",
        check=_regions,
    ),
    _captions(
        "subrip-no-cue-lost",
        f"{P}/captions/lost_cue.srt",
        status="partial",
        reason="invalid_cues",
        caption_format="subrip",
        mime_type=SRT,
        check=_subrip_every_cue,
    ),
    *[
        _captions(
            case_id,
            path,
            mime_type=mime_type,
            text="silence\ufffdhere\n\u200e(1)\u200f shalom x",
        )
        for case_id, path, mime_type in [
            ("webvtt-nul-replaced-bidi-marks-kept", f"{P}/captions/nul_bidi.vtt", "text/vtt"),
            (
                "webvtt-nul-undeclared-type",
                f"{P}/captions/nul_bidi_undeclared.vtt",
                "text/vtt",
            ),
        ]
    ],
    *[
        _captions(
            case_id,
            path,
            status="unsupported",
            reason="invalid_captions",
            content_kind="none",
            text="",
        )
        for case_id, path in [
            ("webvtt-newline-before-signature", f"{P}/captions/newline-first.vtt"),
            ("webvtt-text-after-bom", f"{P}/captions/bom-text.vtt"),
            ("webvtt-empty-file", f"{P}/captions/empty-file.vtt"),
        ]
    ],
    _captions(
        "text-plain-not-captions",
        f"{P}/readme.txt",
        status="unsupported",
        reason="unsupported_content",
        content_kind="none",
        caption_format=None,
        mime_type="text/plain",
        text="",
    ),
    _captions(
        "track-by-language",
        f"{P}/talks/rivers",
        language="fr-CA",
        declared="fr",
        source=f"{P}/captions/styled_fr.vtt",
        check=_french_first,
    ),
    _captions(
        "track-default",
        f"{P}/talks/rivers",
        language="ja",
        status="partial",
        reason="language_mismatch",
        declared="en",
        source=f"{P}/captions/styled.vtt",
        check=_styled,
    ),
    _captions(
        "track-first-without-default",
        f"{P}/talks/two",
        declared="fr",
        source=f"{P}/captions/styled_fr.vtt",
        check=_french_first,
    ),
    _captions(
        "track-srclang-declares-language",
        f"{P}/talks/story",
        language="fr",
        caption_format="subrip",
        mime_type=SRT,
        declared="fr",
        source=f"{P}/captions/story_fr.srt",
        check=_subrip,
    ),
    _captions(
        "page-without-track",
        f"{P}/talks/silent",
        status="empty",
        reason="no_captions",
        content_kind="none",
        caption_format=None,
        mime_type="text/html",
        declared="en",
        text="",
    ),
    _captions(
        "meta-charset-hex-track",
        f"{P}/talks/hex",
        declared="en",
        source=f"{P}/captions/styled.vtt",
        check=_styled,
    ),
    *[
        _captions(
            case_id,
            path,
            status="unsupported",
            reason="unsupported_media",
            content_kind="none",
            caption_format=None,
            mime_type=None,
            source=source,
            text="",
        )
        for case_id, path, source in [
            ("octet-stream-caption-file", f"{P}/captions/octet.vtt", SAME),
            ("octet-stream-track", f"{P}/talks/octet", f"{P}/captions/octet.vtt"),
            ("random-bytes-as-text-vtt", f"{P}/random.vtt", SAME),
        ]
    ],
    *[
        _captions(
            f"platform-{name}",
            url,
            status="unsupported",
            reason="unsupported_source",
            content_kind="none",
            caption_format=None,
            mime_type=None,
            source=None,
            text="",
        )
        for name, url in [
            ("youtube", "https://www.youtube.com/watch?v=dQw4w9WgXcQ"),
            ("vimeo", "https://vimeo.com/76979871"),
        ]
    ],
]

GUARD_CASES = [
    Case(
        "http-scheme-unsafe",
        "http://127.0.0.1/ct/en",
        status="blocked",
        reason="unsafe_url",
        content_kind="none",
        mime_type=None,
        source=None,
        text="",
    ),
    Case(
        "redirect-to-other-loopback-unsafe",
        f"{P}/to-other-loopback",
        status="blocked",
        reason="unsafe_url",
        content_kind="none",
        mime_type=None,
        text="",
    ),
    Case(
        "missing-not-found",
        f"{P}/missing",
        status="unavailable",
        reason="not_found",
        content_kind="none",
        mime_type=None,
        text="",
    ),
]

ALL_CASES = URL_TEXT + CAPTION_CASES + GUARD_CASES
#: The workspace the batch of cases is retrieved into.
BATCH_WORKSPACE = uuid.uuid4()


def _url(site: TLSSite, target: str) -> str:
    if target.startswith("http://"):
        return target.replace("127.0.0.1/", f"127.0.0.1:{site.port}/")
    return site.url(target) if target.startswith("/") else target


@pytest.fixture(scope="module")
def trap(site: TLSSite) -> Iterator[socket.socket]:
    """A listener on 127.0.0.2 at the site's port: anything that dials it is caught."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.2", site.port))
    listener.listen(16)
    listener.setblocking(False)
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def batch(http: object, site: TLSSite) -> Api:
    """A client with a fresh key for the module's workspace (cases run in one batch)."""
    return Api(http, make_key([BATCH_WORKSPACE]))


@pytest.fixture(scope="module")
def settled(
    services: Services, batch: Api, site: TLSSite, trap: socket.socket
) -> dict[str, dict[str, Any]]:
    """Submit every case, then wait for all of them; map case id to its settled retrieval.

    CPU-heavy cases run afterwards, one at a time, so the test environment's short task time
    limit measures their own work rather than their neighbours'.
    """
    _mount(site)

    def submit(case: Case) -> str:
        payload = body(_url(site, case.path), BATCH_WORKSPACE, kind=case.kind)
        if case.language:
            payload["language"] = case.language
        response = batch.post(payload)
        assert response.status_code == 202, response.text
        return str(response.json()["retrieval"]["id"])

    submitted = {case.id: submit(case) for case in ALL_CASES if not case.alone}
    outcomes = {case_id: batch.wait(rid, timeout=120) for case_id, rid in submitted.items()}
    for case in ALL_CASES:
        if case.alone:
            outcomes[case.id] = batch.wait(submit(case), timeout=60)
    return outcomes


def _check_case(case: Case, retrieval: dict[str, Any], site: TLSSite, api: Api) -> None:
    assert retrieval["state"] == "completed", retrieval
    result = retrieval["result"]
    summary = {k: result[k] for k in ("status", "reason", "warnings")}
    assert summary == {
        "status": case.status,
        "reason": case.reason,
        "warnings": list(case.warnings),
    }, (summary, result["provenance"], result["text"][:300])
    assert result["kind"] == case.kind
    prov = result["provenance"]
    assert prov["content_kind"] == case.content_kind
    assert prov["caption_format"] == case.caption_format
    assert prov["mime_type"] == case.mime_type
    assert prov["language"] == case.declared
    assert prov["language_source"] == ("publisher_declared" if case.declared else "unknown")
    assert prov["parser_version"] == "research-public-retrieval/v1"
    assert prov["platform_native_verified"] is False
    expected_source = _url(site, case.path) if case.source == SAME else case.source
    if expected_source is not None and expected_source.startswith("/"):
        expected_source = site.url(expected_source)
    assert prov["source_url"] == expected_source
    if case.status != "rate_limited":
        assert result["retry_after_seconds"] is None
    if case.kind == "url_text":
        assert result["segments"] == []
    if case.text is not None:
        assert result["text"] == case.text
    for phrase in case.contains:
        assert phrase in result["text"], phrase
    for phrase in case.absent:
        assert phrase not in result["text"], phrase
    invisible = INVISIBLE if case.kind == "url_text" else CAPTION_INVISIBLE
    assert not invisible.search(result["text"])
    if case.check is not None:
        case.check(result)
    _check_evidence(retrieval, api)


def _check_evidence(retrieval: dict[str, Any], api: Api) -> None:
    """Evidence is named exactly when there is text or segments, and stores what was returned."""
    result = retrieval["result"]
    if not (result["text"] or result["segments"]):
        assert retrieval["evidence"] is None
        return
    assert result["status"] in ("ready", "partial")
    named = retrieval["evidence"]
    stored = api.evidence(named["evidence_id"], named["revision"]).json()["evidence"]
    assert stored["text"] == result["text"]
    assert stored["segments"] == result["segments"]
    assert stored["title"] == result["title"]


class TestUrlTextThroughWorker:
    """Each url_text rule holds for a retrieval processed by the real worker."""

    @pytest.mark.parametrize("case", URL_TEXT, ids=[c.id for c in URL_TEXT])
    def test_rule(
        self, case: Case, settled: dict[str, dict[str, Any]], site: TLSSite, batch: Api
    ) -> None:
        """The settled result has the rule's status, reason, warnings, provenance and text."""
        _check_case(case, settled[case.id], site, batch)


class TestCaptionsThroughWorker:
    """Each published_captions rule holds for a retrieval processed by the real worker."""

    @pytest.mark.parametrize("case", CAPTION_CASES, ids=[c.id for c in CAPTION_CASES])
    def test_rule(
        self, case: Case, settled: dict[str, dict[str, Any]], site: TLSSite, batch: Api
    ) -> None:
        """The settled result has the rule's status, reason, segments, format and language."""
        _check_case(case, settled[case.id], site, batch)


class TestGuardThroughWorker:
    """The fetch guard's outcomes reach the result unchanged through the worker."""

    @pytest.mark.parametrize("case", GUARD_CASES, ids=[c.id for c in GUARD_CASES])
    def test_rule(
        self, case: Case, settled: dict[str, dict[str, Any]], site: TLSSite, batch: Api
    ) -> None:
        """Unsafe URLs are blocked and unfetched; a 404 is unavailable at its URL."""
        _check_case(case, settled[case.id], site, batch)

    def test_other_loopback_never_dialled(
        self, settled: dict[str, dict[str, Any]], trap: socket.socket, site: TLSSite
    ) -> None:
        """The redirect to 127.0.0.2 is refused before any connection is made."""
        assert settled["redirect-to-other-loopback-unsafe"]["result"]["reason"] == "unsafe_url"
        assert site.hits.get(f"{P}/to-other-loopback", 0) >= 1
        with pytest.raises(BlockingIOError):
            trap.accept()

    def test_rate_limited_carries_retry_after(
        self, api: Api, workspace: uuid.UUID, site: TLSSite, env: Env
    ) -> None:
        """A 429 with Retry-After: 120 is rate_limited with retry_after_seconds 120."""
        import redis

        _mount(site)
        url = site.url(f"{P}/slow-down")
        backoff_key = f"evidence:backoff:https://{site.host}:{site.port}"
        try:
            done = api.wait(api.post(body(url, workspace)).json()["retrieval"]["id"])
        finally:
            # The 429 makes every worker leave the site alone for 120 s: lift that for the
            # rest of the session.
            with redis.Redis.from_url(env.broker_url) as client:
                client.delete(backoff_key)
        assert done["state"] == "completed"
        result = done["result"]
        assert (result["status"], result["reason"]) == ("rate_limited", "rate_limited")
        assert result["retry_after_seconds"] == 120
        assert result["provenance"]["source_url"] == url
        assert result["text"] == "" and done["evidence"] is None

    def test_gzip_bomb_bounded_in_time(self, api: Api, workspace: uuid.UUID, site: TLSSite) -> None:
        """A 64 MiB gzip bomb ends as response_too_large well within the task's time limit."""
        from worker.platform.settings import get_settings

        url = site.add(f"{P}/bomb.html", compression_bomb("gzip", 64 * 1024 * 1024))
        started = time.monotonic()
        done = api.wait(api.post(body(url, workspace)).json()["retrieval"]["id"])
        elapsed = time.monotonic() - started
        assert done["state"] == "completed"
        result = done["result"]
        assert result["reason"] == "response_too_large"
        assert result["status"] in ("partial", "unavailable")
        assert len(result["text"]) <= 20_000
        assert elapsed < get_settings().soft_time_limit, elapsed
