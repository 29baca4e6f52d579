"""Images a page shows, with captions and credits: pure extraction from its HTML.

Sources, in order: `<figure>` with `<img>` and `<figcaption>`, the OpenGraph / Twitter card
image, then other `<img>` elements that carry alt text. One entry per image URL;
later sources only fill fields an earlier one left empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from posixpath import splitext
from urllib.parse import urljoin, urlsplit

import lxml.html

from worker.content.markup import parse_bounded
from worker.content.text import clean_inline

#: Images kept at most per page, and bounds on what is stored of each.
MAX_IMAGES = 50
MAX_URL_CHARS = 2_048
MAX_CAPTION_CHARS = 2_000
MAX_CREDIT_CHARS = 300
#: File extensions → the schema's `format` (a claim, checked against the bytes when fetched).
FORMAT_BY_EXTENSION = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".webp": "webp"}

_CREDIT_CLASS = re.compile(
    r"credit|copyright|byline|attribution|photographer|source|rights", re.IGNORECASE
)
_CREDIT_TEXT = re.compile(
    r"(?:©|\(c\)\s|copyright\b|photo(?:graph)?s?\s*(?:by|:)|credits?\s*:|image\s*:|"
    r"foto\s*:|crédits?\s*:|bild\s*:)",
    re.IGNORECASE,
)
_OG_IMAGE = (
    "//meta[@property='og:image' or @property='og:image:url' or @property='og:image:secure_url'"
    " or @name='og:image']/@content"
)
_TWITTER_IMAGE = (
    "//meta[@name='twitter:image' or @name='twitter:image:src' or @property='twitter:image']"
    "/@content"
)


@dataclass(frozen=True)
class ImageRef:
    """An image as a page presents it."""

    url: str
    caption: str = ""
    alt: str = ""
    copyright: str | None = None
    format: str | None = None


def image_format(url: str) -> str | None:
    """The format a URL's extension claims (png, jpeg, webp), or None."""
    return FORMAT_BY_EXTENSION.get(splitext(urlsplit(url).path)[1].lower())


def _absolute(src: str | None, base_url: str) -> str | None:
    if not src or not src.strip() or src.strip().startswith("data:"):
        return None
    try:
        url = urljoin(base_url, src.strip())
        scheme = urlsplit(url).scheme
    except ValueError:  # "https://[oops": urllib refuses it, and it is no image to list
        return None
    if scheme not in ("http", "https") or len(url) > MAX_URL_CHARS:
        return None
    return url


def _text(value: str | None, limit: int) -> str:
    return (clean_inline(value) or "")[:limit]


def _first(tree: lxml.html.HtmlElement, xpath: str) -> str | None:
    values = [v for v in tree.xpath(xpath) if isinstance(v, str) and v.strip()]
    return values[0] if values else None


def _img_src(img: lxml.html.HtmlElement) -> str | None:
    src: str | None = img.get("src") or img.get("data-src")
    if not src and img.get("srcset"):
        src = img.get("srcset", "").split(",")[0].split()[0]
    return src


def split_credit(caption: str) -> tuple[str, str | None]:
    """Split "Lake at dawn. Photo: A. Smith" into the caption and its credit."""
    match = _CREDIT_TEXT.search(caption)
    if match is None:
        return caption, None
    head, credit = caption[: match.start()].strip(), caption[match.start() :].strip()
    return head, credit[:MAX_CREDIT_CHARS] or None


def _is_credit(element: lxml.html.HtmlElement) -> bool:
    marks = f"{element.get('class', '')} {element.get('itemprop', '')} {element.get('id', '')}"
    return element.tag in ("small", "cite") or bool(_CREDIT_CLASS.search(marks))


def _figcaption(figure: lxml.html.HtmlElement) -> tuple[str, str | None]:
    """The caption of a figure without its credit, and the credit."""
    captions = figure.xpath(".//figcaption")
    credit_elements = [el for el in figure.iter() if isinstance(el.tag, str) and _is_credit(el)]
    credit = _text(" ".join(el.text_content() for el in credit_elements), MAX_CREDIT_CHARS) or None
    if not captions:
        return "", credit
    caption = captions[0]
    parts = [caption.text or ""]
    for child in caption:
        if not (isinstance(child.tag, str) and _is_credit(child)):
            parts.append(child.text_content())
        parts.append(child.tail or "")
    text = _text(" ".join(parts), MAX_CAPTION_CHARS)
    if credit is None:
        text, credit = split_credit(text)
    return text, credit


def _card_images(tree: lxml.html.HtmlElement, base_url: str) -> list[ImageRef]:
    """The OpenGraph and Twitter card images (credited to the page's stated copyright)."""
    found: list[ImageRef] = []
    rights = _first(tree, "//meta[@name='copyright' or @name='dcterms.rightsHolder']/@content")
    for xpath, alt_xpath in (
        (_OG_IMAGE, "//meta[@property='og:image:alt']/@content"),
        (_TWITTER_IMAGE, "//meta[@name='twitter:image:alt']/@content"),
    ):
        url = _absolute(_first(tree, xpath), base_url)
        if url:
            alt = _text(_first(tree, alt_xpath), MAX_CAPTION_CHARS)
            found.append(ImageRef(url, alt, alt, _text(rights, MAX_CREDIT_CHARS) or None))
    return found


def _figure_images(tree: lxml.html.HtmlElement, base_url: str) -> list[ImageRef]:
    """`<figure>` images with their `<figcaption>` and credit."""
    found: list[ImageRef] = []
    for figure in tree.iter("figure"):
        imgs = list(figure.iter("img"))
        url = _absolute(_img_src(imgs[0]), base_url) if imgs else None
        if url:
            caption, credit = _figcaption(figure)
            alt = _text(imgs[0].get("alt"), MAX_CAPTION_CHARS)
            found.append(ImageRef(url, caption or alt, alt, credit))
    return found


def _alt_images(tree: lxml.html.HtmlElement, base_url: str) -> list[ImageRef]:
    """Other `<img>` elements that carry alt text."""
    found: list[ImageRef] = []
    for img in tree.iter("img"):
        alt = _text(img.get("alt"), MAX_CAPTION_CHARS)
        url = _absolute(_img_src(img), base_url)
        if url and alt:
            credit = _text(img.get("data-credit") or img.get("data-copyright"), MAX_CREDIT_CHARS)
            found.append(ImageRef(url, alt, alt, credit or None))
    return found


def _merge(first: ImageRef, later: ImageRef) -> ImageRef:
    return replace(
        first,
        caption=first.caption or later.caption,
        alt=first.alt or later.alt,
        copyright=first.copyright or later.copyright,
    )


def images_from_tree(tree: lxml.html.HtmlElement, base_url: str) -> list[ImageRef]:
    """The images of a parsed page (at most MAX_IMAGES), one per URL, with caption and credit.

    Reads the tree only: the pipeline hands over the tree it already parsed for the text.
    """
    merged: dict[str, ImageRef] = {}
    refs = [
        *_figure_images(tree, base_url),
        *_card_images(tree, base_url),
        *_alt_images(tree, base_url),
    ]
    for ref in refs:
        merged[ref.url] = _merge(merged[ref.url], ref) if ref.url in merged else ref
    return [replace(ref, format=image_format(ref.url)) for ref in merged.values()][:MAX_IMAGES]


def extract_images(html: str, base_url: str) -> list[ImageRef]:
    """The images of a page's markup: bounded and parsed as the pipeline does, then read."""
    tree, _ = parse_bounded(html)
    return images_from_tree(tree, base_url) if tree is not None else []
