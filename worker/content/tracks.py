"""`<track>` elements of `<video>`/`<audio>` pages, the choice of one, and platform hosts."""

from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import lxml.html

from worker.domain.languages import normalise_tag, same_language

#: Hosts whose own player pages are not publisher caption files (checked with subdomains).
PLATFORM_HOSTS = frozenset(
    {
        "youtube.com",
        "youtu.be",
        "youtube-nocookie.com",
        "vimeo.com",
        "dailymotion.com",
        "dai.ly",
        "tiktok.com",
        "twitch.tv",
        "facebook.com",
        "fb.watch",
        "instagram.com",
        "rumble.com",
        "bilibili.com",
        "nicovideo.jp",
    }
)
CAPTION_KINDS = frozenset({"captions", "subtitles"})


@dataclass(frozen=True)
class Track:
    """One caption track a page publishes."""

    url: str
    srclang: str | None
    kind: str
    label: str | None
    default: bool


def is_platform_url(url: str) -> bool:
    """Whether `url` belongs to a video platform's own player (by host or parent domain)."""
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    return any(host == h or host.endswith("." + h) for h in PLATFORM_HOSTS)


def _join(base: str, ref: str) -> str | None:
    """`ref` resolved against `base`, or None where urllib refuses it ("https://[oops")."""
    try:
        url = urljoin(base, ref)
        urlsplit(url)
    except ValueError:
        return None
    return url


def _base_url(tree: lxml.html.HtmlElement, page_url: str) -> str:
    for href in tree.xpath("//base/@href"):
        if href.strip():
            return _join(page_url, href.strip()) or page_url
    return page_url


def find_tracks(tree: lxml.html.HtmlElement, page_url: str) -> list[Track]:
    """Return the page's caption/subtitle tracks in document order, src resolved to URLs."""
    base = _base_url(tree, page_url)
    tracks = []
    for element in tree.xpath("//video//track | //audio//track"):
        kind = (element.get("kind") or "subtitles").strip().lower()
        src = (element.get("src") or "").strip()
        if kind not in CAPTION_KINDS or not src:
            continue
        url = _join(base, src)
        if url is None or urlsplit(url).scheme not in ("http", "https"):
            continue
        tracks.append(
            Track(
                url=url,
                srclang=normalise_tag(element.get("srclang")),
                kind=kind,
                label=(element.get("label") or "").strip() or None,
                default=element.get("default") is not None,
            )
        )
    return tracks


def pick_track(tracks: list[Track], language: str | None) -> Track | None:
    """Pick the track in `language` (primary subtag), else the `default` one, else the first."""
    if not tracks:
        return None
    if language:
        exact = [t for t in tracks if t.srclang and t.srclang.lower() == language.lower()]
        close = [t for t in tracks if t.srclang and same_language(language, t.srclang)]
        if exact or close:
            return (exact or close)[0]
    return next((t for t in tracks if t.default), tracks[0])
