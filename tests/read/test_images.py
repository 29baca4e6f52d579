"""Images of a page (pure extraction) and image bytes checked by magic numbers."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from api.errors import ApiError
from api.services.image_fetch import KeySlots
from worker.content.images import extract_images, images_from_tree, split_credit
from worker.content.markup import parse_html
from worker.domain.reasons import Reason
from worker.fetch.image_bytes import ImageUnavailable, fetch_image, sniff_image
from worker.fetch.types import FetchedResponse, FetchFailure

IMAGES = Path(__file__).resolve().parents[1] / "fixtures" / "images"
BASE = "https://news.test/2026/lakes/story.html"

PAGE = """<!doctype html><html><head>
<meta property="og:image" content="https://cdn.test/hero.jpg">
<meta property="og:image:alt" content="Bergsee from the north ridge">
<meta name="twitter:image" content="/img/card.webp">
<meta name="copyright" content="Example Science News">
</head><body>
<figure><img src="photos/lake.png" alt="A lake">
<figcaption>Alpine lake at dawn. <span class="credit">Photo: A. Smith / Agency</span></figcaption>
</figure>
<figure><img data-src="/img/gear.JPEG">
<figcaption>Sampling gear. © Jane Doe 2026</figcaption></figure>
<figure><img srcset="/img/wide.webp 2x, /img/narrow.webp 1x"><figcaption>Map</figcaption></figure>
<img src="https://cdn.test/hero.jpg" alt="Hero duplicate">
<img src="/pixel.gif">
<img src="data:image/png;base64,AAAA" alt="inline">
<img src="/chart.png" alt="Oxygen by month" data-credit="Lab data">
</body></html>"""


def fetched(body: bytes, truncated: bool = False) -> FetchedResponse:
    return FetchedResponse("https://cdn.test/x", 200, {}, body, truncated, None)


class FakeFetcher:
    """Answers fetch_media with a canned response or failure."""

    def __init__(self, outcome: FetchedResponse | FetchFailure) -> None:
        self.outcome = outcome

    def fetch_media(
        self, url: str, max_bytes: int, total_seconds: float | None = None
    ) -> FetchedResponse:
        if isinstance(self.outcome, FetchFailure):
            raise self.outcome
        return self.outcome


@pytest.fixture(scope="module")
def images() -> dict[str, object]:
    return {ref.url: ref for ref in extract_images(PAGE, BASE)}


class TestExtractImages:
    """What a page's markup says about its images."""

    def test_figure_caption_and_credit_element(self, images: dict) -> None:
        """A <figure>'s figcaption is the caption; a credit element is the copyright."""
        lake = images["https://news.test/2026/lakes/photos/lake.png"]
        assert lake.caption == "Alpine lake at dawn."
        assert lake.copyright == "Photo: A. Smith / Agency"
        assert lake.alt == "A lake" and lake.format == "png"

    def test_copyright_sign_in_caption(self, images: dict) -> None:
        """A © notice inside the caption text is split off as the credit."""
        gear = images["https://news.test/img/gear.JPEG"]
        assert (gear.caption, gear.copyright, gear.format) == (
            "Sampling gear.",
            "© Jane Doe 2026",
            "jpeg",
        )

    def test_srcset_without_src(self, images: dict) -> None:
        """An image given only by srcset uses its first candidate."""
        assert images["https://news.test/img/wide.webp"].caption == "Map"

    def test_card_images_use_page_copyright(self, images: dict) -> None:
        """og:image and twitter:image are recorded, credited to the page's stated copyright."""
        hero = images["https://cdn.test/hero.jpg"]
        assert hero.caption == "Bergsee from the north ridge"
        assert hero.copyright == "Example Science News"
        assert images["https://news.test/img/card.webp"].format == "webp"

    def test_alt_images_and_skips(self, images: dict) -> None:
        """Images with alt text are kept; unlabelled and data: images are not; URLs are unique."""
        chart = images["https://news.test/chart.png"]
        assert (chart.caption, chart.copyright) == ("Oxygen by month", "Lab data")
        assert "https://news.test/pixel.gif" not in images
        assert not any(url.startswith("data:") for url in images)
        assert len(images) == 6

    def test_urls_urllib_refuses_are_skipped(self) -> None:
        """An src like "https://[oops" (ValueError in urllib) is no image, not a failed page."""
        html = (
            '<meta property="og:image" content="https://[x/og.png">'
            '<figure><img src="https://[::1/a.png"><figcaption>Broken</figcaption></figure>'
            '<figure><img src="/b.png"><figcaption>Fine</figcaption></figure>'
        )
        assert [i.url for i in extract_images(html, BASE)] == ["https://news.test/b.png"]

    def test_no_markup(self) -> None:
        """Empty or image-free pages yield nothing."""
        assert extract_images("", BASE) == []
        assert extract_images("<p>text only</p>", BASE) == []

    def test_from_parsed_tree(self) -> None:
        """Reading an already parsed tree finds exactly what reading the markup finds."""
        tree = parse_html(PAGE)
        assert tree is not None
        assert images_from_tree(tree, BASE) == extract_images(PAGE, BASE)
        assert len(images_from_tree(tree, BASE)) == 6

    def test_split_credit(self) -> None:
        """Credits are recognised by their usual wording."""
        assert split_credit("River. Credit: NASA") == ("River.", "Credit: NASA")
        assert split_credit("No credit here") == ("No credit here", None)


class TestImageBytes:
    """Bytes are accepted by what they are, not by what the server says."""

    @pytest.mark.parametrize(
        ("name", "expected"),
        [("python.png", "png"), ("python.jpg", "jpeg"), ("python.webp", "webp")],
    )
    def test_real_images_are_recognised(self, name: str, expected: str) -> None:
        """PNG, JPEG and WebP files are recognised by their magic numbers."""
        assert sniff_image((IMAGES / name).read_bytes()) == expected

    def test_html_is_not_an_image(self) -> None:
        """HTML, GIF and empty bodies are not images we serve."""
        assert sniff_image(b"<!doctype html><html>") is None
        assert sniff_image(b"GIF89a....") is None
        assert sniff_image(b"") is None

    def test_fetch_image_checks_bytes(self) -> None:
        """fetch_image returns real image bytes with their true format."""
        data = (IMAGES / "python.jpg").read_bytes()
        assert fetch_image(FakeFetcher(fetched(data)), "https://cdn.test/x.png") == (data, "jpeg")

    @pytest.mark.parametrize(
        ("outcome", "reason"),
        [
            (fetched(b"<html>not an image</html>"), "unsupported_media"),
            (fetched(b"\x89PNG\r\n\x1a\n" + b"0" * 10, truncated=True), "response_too_large"),
            (FetchFailure(Reason.UNSAFE_URL, "private address"), "unsafe_url"),
            (FetchFailure(Reason.NOT_FOUND, "HTTP 404"), "not_found"),
        ],
    )
    def test_fetch_image_refusals(self, outcome: object, reason: str) -> None:
        """Non-images, oversized bodies and failed fetches give ImageUnavailable with a reason."""
        with pytest.raises(ImageUnavailable) as raised:
            fetch_image(FakeFetcher(outcome), "https://cdn.test/x.png")  # type: ignore[arg-type]
        assert raised.value.reason == reason


class TestKeySlots:
    """At most `limit` image fetches per key at once; one more is refused at once."""

    def test_per_key_bound(self) -> None:
        """A key's third fetch of two is refused with 429; other keys are unaffected."""
        slots = KeySlots()
        a, b = uuid.uuid4(), uuid.uuid4()
        with slots.hold(a, 2, 10), slots.hold(a, 2, 10):
            with pytest.raises(ApiError) as refused, slots.hold(a, 2, 10):
                pass
            assert (refused.value.status, refused.value.code) == (429, "upstream_unavailable")
            assert refused.value.details == {"reason": "rate_limited", "retry_after_seconds": 10}
            with slots.hold(b, 2, 10):
                assert (slots.running(a), slots.running(b)) == (2, 1)
        assert (slots.running(a), slots.running(b)) == (0, 0)

    def test_slot_is_given_back_on_failure(self) -> None:
        """A fetch that fails still gives its slot back."""
        slots = KeySlots()
        key = uuid.uuid4()
        with pytest.raises(ImageUnavailable), slots.hold(key, 1, 10):
            raise ImageUnavailable("timeout")
        with slots.hold(key, 1, 10):
            assert slots.running(key) == 1
