"""Main text and metadata of an HTML page (url_text), with login-wall detection."""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict
from urllib.parse import urlsplit

import lxml.html
import trafilatura
from trafilatura.settings import Document

from worker.content.decoding import decode_body
from worker.content.markup import parse_bounded
from worker.content.results import Content
from worker.content.text import clean_inline, clean_text
from worker.content.vote import voted_text
from worker.domain.languages import is_mismatch, normalise_tag
from worker.domain.reasons import Reason

#: Below this much main text (characters), a page with a password field is a login wall.
LOGIN_MAX_TEXT_CHARS = 400


class ExtractOptions(TypedDict, total=False):
    """The `trafilatura.bare_extraction` options chosen here, named so they type-check."""

    favor_precision: bool
    favor_recall: bool
    include_tables: bool
    include_comments: bool
    fast: bool


#: trafilatura options, chosen on the public benchmarks' development pages (bench/quality):
#: neither precision nor recall favoured (precision mode dropped article lines the vote in
#: `worker.content.vote` keeps anyway); `fast` skips trafilatura's own fallback extractors
#: (readability, jusText), which cost a third of its CPU and which the vote replaces.
EXTRACT_OPTIONS: ExtractOptions = {
    "favor_precision": False,
    "favor_recall": False,
    "include_tables": True,
    "include_comments": False,
    "fast": True,
}
_LOGIN_PATH = re.compile(
    r"/(?:log-?in|sign-?in|signon|auth(?:enticate)?|sso|session/new|account/login)\b", re.I
)
_PAYWALL_MARK = re.compile(r"paywall|regwall|subscriber-only|premium-wall|piano-", re.I)
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


@dataclass
class PageExtraction:
    """What a page yielded: its content, or the reason it is blocked; and its parsed tree.

    `tree` is the page parsed once (None when it had no markup), left as parsed: callers read
    more from it (its images) instead of parsing the page again.
    """

    content: Content
    blocked: Reason | None = None
    tree: lxml.html.HtmlElement | None = None


def declared_language(tree: lxml.html.HtmlElement | None, headers: Mapping[str, str]) -> str | None:
    """Return the language the publisher declared: `<html lang>`, else `Content-Language`."""
    if tree is not None:
        root = tree.getroottree().getroot()
        for attr in ("lang", "xml:lang", _XML_LANG):
            tag = normalise_tag(root.get(attr))
            if tag:
                return tag
    return normalise_tag(headers.get("content-language"))


def _first(tree: lxml.html.HtmlElement, *xpaths: str) -> str | None:
    for xpath in xpaths:
        for value in tree.xpath(xpath):
            text = clean_inline(value if isinstance(value, str) else value.text_content())
            if text:
                return text
    return None


def page_title(tree: lxml.html.HtmlElement) -> str | None:
    """Return og:title, else the first `<h1>` when `<title>` contains it, else `<title>`/`<h1>`."""
    og = _first(tree, "//meta[@property='og:title']/@content")
    if og:
        return og
    title, heading = _first(tree, "//title"), _first(tree, "//h1")
    if title and heading and heading in title:
        return heading
    return title or heading


def page_description(tree: lxml.html.HtmlElement) -> str | None:
    """Return the OpenGraph description, else `<meta name=description>`."""
    return _first(
        tree,
        "//meta[@property='og:description']/@content",
        "//meta[translate(@name,'DESCRIPTION','description')='description']/@content",
    )


def has_password_form(tree: lxml.html.HtmlElement) -> bool:
    """Whether the page asks for a password."""
    return bool(tree.xpath("//input[translate(@type,'PASSWORD','password')='password']"))


def is_login_wall(tree: lxml.html.HtmlElement, text: str, final_url: str) -> bool:
    """Whether a page is really a login or paywall rather than the content asked for."""
    tiny = len(text) < LOGIN_MAX_TEXT_CHARS
    if has_password_form(tree):
        return tiny or bool(_LOGIN_PATH.search(urlsplit(final_url).path))
    marked = any(
        _PAYWALL_MARK.search(f"{el.get('class', '')} {el.get('id', '')}")
        for el in tree.iter("div", "section", "aside", "article")
    )
    return marked and tiny


def main_text(tree: lxml.html.HtmlElement, url: str | None, html: str | None = None) -> str:
    """Return the cleaned main text: the lines of the page that trafilatura, readability-lxml
    and Resiliparse vote for (`voted_text`); metadata is read with lxml.

    `html` is the page's markup as parsed into `tree` (the bounded tree is serialised when it
    is not given). The extractors work on copies, so `tree` is left unchanged for the title,
    the description and the images read from it afterwards.
    """
    text = clean_text(_trafilatura_text(tree, url, EXTRACT_OPTIONS))
    page = html if html is not None else lxml.html.tostring(tree, encoding="unicode")
    voted = voted_text(text, tree, page)
    return text if voted is text else clean_text(voted)


def _trafilatura_text(tree: lxml.html.HtmlElement, url: str | None, options: ExtractOptions) -> str:
    doc = trafilatura.bare_extraction(tree, url=url, with_metadata=False, **options)
    return (doc.text or "") if isinstance(doc, Document) else ""


def extract_html(
    body: bytes | str,
    url: str,
    headers: Mapping[str, str] | None = None,
    language: str | None = None,
    *,
    charset: str | None = None,
    mime_type: str | None = "text/html",
) -> PageExtraction:
    """Turn an HTML page into url_text content (document_text or metadata_only)."""
    headers = headers or {}
    html = decode_body(body, charset) if isinstance(body, bytes) else body
    tree, cut = parse_bounded(html)
    reasons: list[Reason] = [Reason.NODES_LIMITED] if cut else []
    content = Content(source_url=url, mime_type=mime_type, reasons=reasons)
    content.language = declared_language(tree, headers)
    if tree is None:
        return PageExtraction(content)
    # A page cut to its bounds is voted on as cut (its serialised tree), not as sent.
    text = main_text(tree, url, None if cut else html)
    content.title = page_title(tree)
    content.description = page_description(tree)
    if is_login_wall(tree, text, url):
        return PageExtraction(content, Reason.LOGIN_REQUIRED, tree)
    content.text = text
    if text:
        content.content_kind = "document_text"
    elif content.title or content.description:
        content.content_kind = "metadata_only"
        reasons.append(Reason.METADATA_ONLY)
    if is_mismatch(language, content.language):
        reasons.append(Reason.LANGUAGE_MISMATCH)
    return PageExtraction(content, tree=tree)
