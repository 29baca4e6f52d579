"""The content pipeline end to end: the real Fetcher against a loopback HTTPS site."""

import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support import hostile
from tests.support.schemas import validate_result
from tests.support.tls_site import Page, TLSSite
from worker.content import decoding, markup
from worker.content.images import ImageRef, extract_images
from worker.domain.reasons import Reason
from worker.fetch.fetcher import Fetcher
from worker.fetch.types import FetchedResponse, FetchFailure
from worker.platform.settings import Settings
from worker.retrieval.pipeline import run_pipeline

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PAGES = FIXTURES / "pages"
CAPTIONS = FIXTURES / "captions"
NOW = datetime(2024, 5, 1, 12, 0, 0, 123_000, tzinfo=UTC)
SRT = "application/x-subrip"


def _serve(site: TLSSite) -> None:
    """Mount every fixture at its path."""
    site.page(
        "/fr", (PAGES / "article_fr_latin1.html").read_bytes(), "text/html; charset=ISO-8859-1"
    )
    site.page("/ja", (PAGES / "article_ja_sjis.html").read_bytes(), "text/html")
    site.page(
        "/ru", (PAGES / "article_ru_cp1251.html").read_bytes(), "text/html; charset=windows-1251"
    )
    site.page("/en", (PAGES / "article_en_bom.html").read_bytes(), "text/html")
    site.page("/login-page", (PAGES / "login.html").read_bytes())
    site.page("/account/login", (PAGES / "login.html").read_bytes())
    site.add("/members/story", Page(b"", "", 302, {"Location": "/account/login?next=/members"}))
    site.page("/gallery", (PAGES / "metadata_only.html").read_bytes())
    site.page("/blank", b"<html><body></body></html>")
    site.page("/talks/rivers", (PAGES / "video_tracks.html").read_bytes())
    site.page("/talks/silent", (PAGES / "video_no_track.html").read_bytes())
    site.page(
        "/notes.txt",
        "Plain\u200b notes.\r\n\r\n\r\nSecond   paragraph.",
        "text/plain; charset=utf-8",
    )
    site.page("/readme.txt", "Just a readme, no cues here.", "text/plain")
    site.page("/plain-captions.txt", (CAPTIONS / "story_fr.srt").read_bytes(), "text/plain")
    site.page("/big.html", b"<html><body><p>" + b"word " * 20_000 + b"</p></body></html>")
    site.page("/big-empty.html", b"<html><head><script>" + b"x" * 20_000 + b"</script>")
    for name in (
        "styled.vtt",
        "styled_fr.vtt",
        "broken_crlf_bom.vtt",
        "rolling_auto.vtt",
        "unparsable.vtt",
        "empty.vtt",
    ):
        site.page(f"/captions/{name}", (CAPTIONS / name).read_bytes(), "text/vtt; charset=utf-8")
    site.page("/captions/story_fr.srt", (CAPTIONS / "story_fr.srt").read_bytes(), SRT)
    long_text = " ".join(f"word{i}" for i in range(6_000))
    site.page("/long.txt", long_text, "text/plain")
    cues = "".join(
        f"{i + 1}\n00:{i // 60:02d}:{i % 60:02d},000 --> "
        f"00:{i // 60:02d}:{i % 60:02d},900\nline {i}\n\n"
        for i in range(1_500)
    )
    site.page("/captions/many.srt", cues, SRT)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSSite]:
    with TLSSite() as running:
        _serve(running)
        yield running


def _settings(site: TLSSite, tmp: Path, **extra: Any) -> Settings:
    return Settings(
        egress_allow_cidrs=["127.0.0.1/32"],
        ca_bundle=site.write_ca(tmp / "ca.pem"),
        fetch_allowed_ports=[site.port],
        robots_txt=False,
        redis_url=hostile.private_redis_url(14),
        **extra,
    )


@pytest.fixture(scope="module")
def fetcher(site: TLSSite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fetcher]:
    client = Fetcher(_settings(site, tmp_path_factory.mktemp("ca")))
    yield client
    client.close()


@pytest.fixture(scope="module")
def small(site: TLSSite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fetcher]:
    client = Fetcher(_settings(site, tmp_path_factory.mktemp("ca2"), fetch_max_bytes=10_000))
    yield client
    client.close()


class SpyFetcher:
    """Wraps a fetcher and records every URL asked for."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.urls: list[str] = []

    def fetch(self, url: str) -> FetchedResponse:
        self.urls.append(url)
        return self.inner.fetch(url)


def run(
    fetcher: Any, url: str, kind: str = "url_text", language: str | None = None
) -> dict[str, Any]:
    """Run the pipeline at a fixed time and check the result against the schema."""
    return validate_result(run_pipeline(fetcher, url, kind, language, now=lambda: NOW).result)  # type: ignore[arg-type]


class TestUrlText:
    """url_text over real HTTPS."""

    @pytest.mark.parametrize(
        ("path", "lang", "phrase", "junk"),
        [
            ("/fr", "fr-FR", "« Nos élèves méritent des salles de classe", "Mentions légales"),
            ("/ja", "ja", "京都市内の紅葉は、今年は例年よりも一週間ほど遅れて", "著作権"),
            ("/ru", "ru", "В Казани в субботу открыли движение по новому мосту", "Все права"),
            (
                "/en",
                "en-GB",
                "Ecologists say the meadows support far more pollinators",
                "Love this",
            ),
        ],
    )
    def test_articles_in_several_encodings(
        self, fetcher: Fetcher, site: TLSSite, path: str, lang: str, phrase: str, junk: str
    ) -> None:
        """Pages in ISO-8859-1, Shift_JIS, windows-1251 and UTF-8+BOM give clean main text."""
        result = run(fetcher, site.url(path))
        assert result["status"] == "ready" and result["reason"] is None
        assert phrase in result["text"]
        assert junk not in result["text"] and "Advertisement" not in result["text"]
        assert "\ufeff" not in result["text"]
        assert result["title"] and result["description"]
        prov = result["provenance"]
        assert prov["language"] == lang and prov["language_source"] == "publisher_declared"
        assert prov["content_kind"] == "document_text" and prov["mime_type"] == "text/html"
        assert prov["source_url"] == site.url(path)
        assert prov["retrieved_at"] == "2024-05-01T12:00:00.123Z"
        assert prov["platform_native_verified"] is False and prov["caption_format"] is None

    def test_language_match_by_primary_subtag(self, fetcher: Fetcher, site: TLSSite) -> None:
        """Requesting en on an en-GB page is ready."""
        assert run(fetcher, site.url("/en"), language="en")["status"] == "ready"

    def test_language_mismatch(self, fetcher: Fetcher, site: TLSSite) -> None:
        """Requesting de on a French page is partial, language_mismatch, text kept."""
        result = run(fetcher, site.url("/fr"), language="de")
        assert (result["status"], result["reason"]) == ("partial", "language_mismatch")
        assert "Besançon" in result["text"]

    def test_login_page(self, fetcher: Fetcher, site: TLSSite) -> None:
        """A login form page is blocked, login_required, with no text."""
        result = run(fetcher, site.url("/login-page"))
        assert (result["status"], result["reason"], result["text"]) == (
            "blocked",
            "login_required",
            "",
        )
        assert result["provenance"]["content_kind"] == "none"

    def test_redirect_to_login(self, fetcher: Fetcher, site: TLSSite) -> None:
        """A redirect that lands on /account/login is login_required at the final URL."""
        result = run(fetcher, site.url("/members/story"))
        assert result["reason"] == "login_required"
        assert result["provenance"]["source_url"].startswith(site.url("/account/login"))

    def test_metadata_only(self, fetcher: Fetcher, site: TLSSite) -> None:
        """Title and description without body text is partial, metadata_only."""
        result = run(fetcher, site.url("/gallery"))
        assert (result["status"], result["reason"]) == ("partial", "metadata_only")
        assert result["title"] == "Photo gallery: spring"
        assert result["provenance"]["content_kind"] == "metadata_only"

    def test_nothing(self, fetcher: Fetcher, site: TLSSite) -> None:
        """An empty page is empty, no_text, language unknown."""
        result = run(fetcher, site.url("/blank"))
        assert (result["status"], result["reason"]) == ("empty", "no_text")
        assert result["provenance"]["language_source"] == "unknown"

    def test_plain_text(self, fetcher: Fetcher, site: TLSSite) -> None:
        """text/plain is cleaned and returned as document_text."""
        result = run(fetcher, site.url("/notes.txt"))
        assert result["status"] == "ready"
        assert result["text"] == "Plain notes.\n\nSecond paragraph."
        assert result["provenance"]["mime_type"] == "text/plain"

    def test_caption_file_as_url_text(self, fetcher: Fetcher, site: TLSSite) -> None:
        """A caption file asked as url_text gives its cue text as document text, no segments."""
        result = run(fetcher, site.url("/captions/styled.vtt"))
        assert result["status"] == "ready" and result["segments"] == []
        assert result["text"].startswith("Good morning & welcome to Rivers of Europe.")
        assert result["provenance"]["content_kind"] == "document_text"
        assert result["provenance"]["language"] == "en"

    def test_text_limited(self, fetcher: Fetcher, site: TLSSite) -> None:
        """Text over 20 000 characters is cut at a word boundary: partial, text_limited."""
        result = run(fetcher, site.url("/long.txt"))
        assert (result["status"], result["reason"]) == ("partial", "text_limited")
        assert len(result["text"]) <= 20_000
        assert result["text"].split(" ")[-1].startswith("word")
        assert " ".join(f"word{i}" for i in range(6_000)).startswith(result["text"])

    def test_fetch_failure(self, fetcher: Fetcher, site: TLSSite) -> None:
        """A 404 is unavailable/not_found with the source URL when it was reached."""
        result = run(fetcher, site.url("/missing"))
        assert result["status"] == "unavailable"
        assert result["reason"] in ("not_found", "unavailable")
        assert result["text"] == "" and result["segments"] == []

    def test_unsafe_url(self, fetcher: Fetcher) -> None:
        """A plain-http URL is never fetched: blocked, unsafe_url, no source URL."""
        result = run(fetcher, "http://127.0.0.1/x")
        assert (result["status"], result["reason"]) == ("blocked", "unsafe_url")
        assert result["provenance"]["source_url"] is None


class TestTruncated:
    """Bodies cut at the byte bound."""

    def test_prefix_used(self, small: Fetcher, site: TLSSite) -> None:
        """A truncated page with usable text is partial, response_too_large."""
        result = run(small, site.url("/big.html"))
        assert (result["status"], result["reason"]) == ("partial", "response_too_large")
        assert result["text"].startswith("word word")

    def test_nothing_usable(self, small: Fetcher, site: TLSSite) -> None:
        """A truncated page with nothing usable is unavailable, response_too_large."""
        result = run(small, site.url("/big-empty.html"))
        assert (result["status"], result["reason"]) == ("unavailable", "response_too_large")


class TestCaptions:
    """published_captions over real HTTPS."""

    def test_styled_webvtt(self, fetcher: Fetcher, site: TLSSite) -> None:
        """A styled file with voices and entities gives clean segments and text."""
        result = run(fetcher, site.url("/captions/styled.vtt"), "published_captions", "en")
        assert result["status"] == "ready"
        assert result["segments"][0] == {
            "start_ms": 500,
            "end_ms": 3000,
            "text": "Good morning & welcome to Rivers of Europe.",
        }
        assert "— more than any other river" in result["segments"][2]["text"]
        assert result["text"].count("\n") == len(result["segments"]) - 1
        prov = result["provenance"]
        assert (prov["caption_format"], prov["content_kind"]) == (
            "webvtt",
            "published_caption_file",
        )
        assert (prov["language"], prov["language_source"]) == ("en", "publisher_declared")
        assert prov["mime_type"] == "text/vtt"

    def test_broken_cues(self, fetcher: Fetcher, site: TLSSite) -> None:
        """A BOM+CRLF file with backwards, empty and malformed cues is partial, invalid_cues."""
        result = run(fetcher, site.url("/captions/broken_crlf_bom.vtt"), "published_captions")
        assert (result["status"], result["reason"]) == ("partial", "invalid_cues")
        assert [s["text"] for s in result["segments"]] == [
            "Welcome back to the programme.",
            "Thanks for having me.",
            "Let us talk about tides & currents.",
        ]
        assert result["provenance"]["language"] is None
        assert result["provenance"]["language_source"] == "unknown"

    def test_rolling_auto_captions(self, fetcher: Fetcher, site: TLSSite) -> None:
        """Rolling auto-captions are collapsed in text; segments keep every cue as it is."""
        result = run(fetcher, site.url("/captions/rolling_auto.vtt"), "published_captions")
        assert (
            result["text"] == "hello everyone welcome\nto the channel\ntoday we talk about rivers"
        )
        assert len(result["segments"]) == 5
        assert result["segments"][2]["text"] == "hello everyone welcome to the channel"

    def test_subrip(self, fetcher: Fetcher, site: TLSSite) -> None:
        """An SRT with a BOM parses as subrip; no declared language."""
        result = run(fetcher, site.url("/captions/story_fr.srt"), "published_captions")
        assert result["status"] == "ready"
        assert result["provenance"]["caption_format"] == "subrip"
        assert result["segments"][1]["text"] == "Elle traversait la forêt & la plaine."
        assert result["provenance"]["language"] is None

    def test_srt_served_as_text_plain(self, fetcher: Fetcher, site: TLSSite) -> None:
        """Captions served as text/plain are sniffed."""
        result = run(fetcher, site.url("/plain-captions.txt"), "published_captions")
        assert result["provenance"]["caption_format"] == "subrip" and result["segments"]

    def test_cues_limited(self, fetcher: Fetcher, site: TLSSite) -> None:
        """1 500 cues keep the first 1 000: partial, cues_limited."""
        result = run(fetcher, site.url("/captions/many.srt"), "published_captions")
        assert (result["status"], result["reason"]) == ("partial", "cues_limited")
        assert len(result["segments"]) == 1_000

    def test_unparsable(self, fetcher: Fetcher, site: TLSSite) -> None:
        """An unparsable caption file is unsupported, invalid_captions."""
        result = run(fetcher, site.url("/captions/unparsable.vtt"), "published_captions")
        assert (result["status"], result["reason"]) == ("unsupported", "invalid_captions")

    def test_empty_file(self, fetcher: Fetcher, site: TLSSite) -> None:
        """A caption file with no cue is empty, no_captions."""
        result = run(fetcher, site.url("/captions/empty.vtt"), "published_captions")
        assert (result["status"], result["reason"]) == ("empty", "no_captions")

    def test_plain_text_not_captions(self, fetcher: Fetcher, site: TLSSite) -> None:
        """text/plain that is not VTT/SRT is unsupported, unsupported_content."""
        result = run(fetcher, site.url("/readme.txt"), "published_captions")
        assert (result["status"], result["reason"]) == ("unsupported", "unsupported_content")

    def test_track_picked_by_language_through_same_fetcher(
        self, fetcher: Fetcher, site: TLSSite
    ) -> None:
        """The page's fr track is fetched through the same fetcher; its language is declared."""
        spy = SpyFetcher(fetcher)
        result = run(spy, site.url("/talks/rivers"), "published_captions", "fr-CA")
        assert spy.urls == [site.url("/talks/rivers"), site.url("/captions/styled_fr.vtt")]
        assert result["status"] == "ready"
        assert result["segments"][0]["text"].startswith("Bonjour")
        assert result["provenance"]["language"] == "fr"
        assert result["provenance"]["source_url"] == site.url("/captions/styled_fr.vtt")

    def test_default_track(self, fetcher: Fetcher, site: TLSSite) -> None:
        """Without a language match the default track (relative src) is used."""
        spy = SpyFetcher(fetcher)
        result = run(spy, site.url("/talks/rivers"), "published_captions", "ja")
        assert spy.urls[-1] == site.url("/captions/styled.vtt")
        assert (result["status"], result["reason"]) == ("partial", "language_mismatch")

    def test_page_without_track(self, fetcher: Fetcher, site: TLSSite) -> None:
        """An HTML page with no track is empty, no_captions."""
        result = run(fetcher, site.url("/talks/silent"), "published_captions")
        assert (result["status"], result["reason"]) == ("empty", "no_captions")

    @pytest.mark.parametrize(
        "url",
        [
            "https://www.youtube.com/watch?v=x",
            "https://youtu.be/x",
            "https://vimeo.com/1",
            "https://www.dailymotion.com/video/x",
            "https://www.tiktok.com/@a/video/1",
            "https://www.twitch.tv/videos/1",
        ],
    )
    def test_platform_pages_not_fetched(self, fetcher: Fetcher, url: str) -> None:
        """Video platform players are unsupported_source without any fetch."""
        spy = SpyFetcher(fetcher)
        result = run(spy, url, "published_captions")
        assert (result["status"], result["reason"]) == ("unsupported", "unsupported_source")
        assert spy.urls == []
        assert result["provenance"]["source_url"] is None


class FailingFetcher:
    """Raises a given FetchFailure."""

    def __init__(self, failure: FetchFailure) -> None:
        self.failure = failure

    def fetch(self, url: str) -> FetchedResponse:
        raise self.failure


class TestFetchFailures:
    """FetchFailure becomes a failure result with its fields."""

    def test_rate_limited(self) -> None:
        """rate_limited carries retry_after_seconds and the source URL."""
        failure = FetchFailure(
            Reason.RATE_LIMITED, source_url="https://a.example/x", retry_after_seconds=120
        )
        result = run(FailingFetcher(failure), "https://a.example/x")
        assert (result["status"], result["retry_after_seconds"]) == ("rate_limited", 120)
        assert result["provenance"]["source_url"] == "https://a.example/x"

    def test_warnings_and_unknown_reason(self) -> None:
        """Warnings are kept; a reason that is not a failure reason becomes unavailable."""
        failure = FetchFailure(Reason.TEXT_LIMITED, warnings=[Reason.TIMEOUT])
        result = run(FailingFetcher(failure), "https://a.example/x", "published_captions")
        assert (result["status"], result["reason"], result["warnings"]) == (
            "unavailable",
            "unavailable",
            ["timeout"],
        )

    def test_track_fetch_failure(self, fetcher: Fetcher, site: TLSSite) -> None:
        """A track whose fetch fails reports that failure."""

        class TrackFails(SpyFetcher):
            def fetch(self, url: str) -> FetchedResponse:
                if url.endswith(".vtt"):
                    raise FetchFailure(Reason.TIMEOUT, source_url=None)
                return super().fetch(url)

        result = run(TrackFails(fetcher), site.url("/talks/rivers"), "published_captions")
        assert (result["status"], result["reason"]) == ("unavailable", "timeout")


GALLERY_URL = "https://lakes.example/2026/story.html"
LAKE_PARAGRAPH = "<p>Alpine lakes warmed faster than expected this decade, researchers said.</p>"
GALLERY = (
    '<!doctype html><html lang="en"><head><title>Lakes warm up</title>'
    '<meta property="og:image" content="/img/card.jpg"><meta name="copyright" content="Lake News">'
    "</head><body><nav><a href='/'>Home</a></nav><article><h1>Lakes warm up</h1>"
    + LAKE_PARAGRAPH
    * 8
    + '<figure><img src="photos/lake.png" alt="A lake"><figcaption>The lake at dawn. '
    '<span class="credit">Photo: A. Smith</span></figcaption></figure>'
    '<img src="/chart.webp" alt="Oxygen by month">'
    '<video><track kind="captions" src="/captions/lake.vtt" srclang="en"></video>'
    "</article></body></html>"
)


class CannedFetcher:
    """Answers from a dict of URL to (body, media type), without a network."""

    def __init__(self, bodies: dict[str, tuple[bytes, str | None]]) -> None:
        self.bodies = bodies

    def fetch(self, url: str) -> FetchedResponse:
        body, mime_type = self.bodies[url]
        return FetchedResponse(url, 200, {}, body, False, mime_type, "utf-8")


@pytest.fixture
def page_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count decodes, bounds checks, tag scans and parses, wherever a worker module calls them."""
    counts = {"decode_body": 0, "parse_bounded": 0, "bound_markup": 0, "parse_html": 0}

    def counting(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(*args, **kwargs)

        return wrapper

    reals = {
        "decode_body": decoding.decode_body,
        "parse_bounded": markup.parse_bounded,
        "bound_markup": markup.bound_markup,
        "parse_html": markup.parse_html,
    }
    for module_name, module in list(sys.modules.items()):
        if module_name != "worker" and not module_name.startswith("worker."):
            continue
        for name, real in reals.items():
            if getattr(module, name, None) is real:
                monkeypatch.setattr(module, name, counting(name, real))
    return counts


def _old_way_images() -> tuple[ImageRef, ...]:
    """The page's images as a second decode and parse of its markup finds them."""
    return tuple(extract_images(GALLERY, GALLERY_URL))


class TestPageParsedOnce:
    """A page is decoded, bounded and parsed once; its images come from that same tree."""

    def test_url_text_reads_the_page_once(self, page_reads: dict[str, int]) -> None:
        """url_text: one decode, one bounded parse (no tag scan: the tree keeps the bounds)."""
        fetcher = CannedFetcher({GALLERY_URL: (GALLERY.encode(), "text/html")})
        output = run_pipeline(fetcher, GALLERY_URL, "url_text", None, now=lambda: NOW)
        assert page_reads == {
            "decode_body": 1,
            "parse_bounded": 1,
            "bound_markup": 0,
            "parse_html": 1,
        }
        assert validate_result(output.result)["status"] == "ready"
        assert output.images == _old_way_images()
        lake = output.images[0]
        assert (lake.url, lake.caption, lake.copyright) == (
            "https://lakes.example/2026/photos/lake.png",
            "The lake at dawn.",
            "Photo: A. Smith",
        )
        assert len(output.images) == 3

    def test_captions_read_the_page_once(self, page_reads: dict[str, int]) -> None:
        """published_captions: the page is parsed once, for its track and for its images."""
        vtt = b"WEBVTT\n\n00:00.000 --> 00:02.000\nThe lake at dawn.\n"
        fetcher = CannedFetcher(
            {
                GALLERY_URL: (GALLERY.encode(), "text/html"),
                "https://lakes.example/captions/lake.vtt": (vtt, "text/vtt"),
            }
        )
        output = run_pipeline(fetcher, GALLERY_URL, "published_captions", None, now=lambda: NOW)
        assert validate_result(output.result)["text"] == "The lake at dawn."
        assert (page_reads["parse_bounded"], page_reads["parse_html"]) == (1, 1)
        assert output.images == _old_way_images()

    def test_no_images_without_content(self) -> None:
        """A page that yields no text (a login wall) brings no images."""
        login = GALLERY.replace("<article>", '<form><input type="password"></form><article>')
        login = login.replace(LAKE_PARAGRAPH * 8, "<p>Members only.</p>")
        fetcher = CannedFetcher({GALLERY_URL: (login.encode(), "text/html")})
        output = run_pipeline(fetcher, GALLERY_URL, "url_text", None, now=lambda: NOW)
        assert output.result["reason"] == "login_required"
        assert output.images == ()
