"""Bound markup before parsing: a cheap tag scan that cuts pages with absurd node counts."""

import re

import lxml.html
from lxml import etree

#: Most elements a page may have before it is cut. trafilatura costs about 70-130 µs per
#: element (measured: 30 000 took 2-4 s, more than a 2 s extract budget on a busy worker);
#: 10 000 is about 1 s, and is still seven times what counts as an excessive DOM.
MAX_ELEMENTS = 10_000
#: Deepest nesting kept; libxml2 silently stops parsing at 256.
MAX_DEPTH = 200

_TAG = re.compile(r"<(?:(!--)|(/?)([a-zA-Z][a-zA-Z0-9:-]{0,64})(?=[\s/>])[^<>]*?(/?)>)")
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>", re.IGNORECASE)
_VOID = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
        "keygen",
    ]
)
#: Elements whose end tag may be omitted: they do not count towards depth.
_OPTIONAL_END = frozenset(
    [
        "p",
        "li",
        "dt",
        "dd",
        "tr",
        "td",
        "th",
        "thead",
        "tbody",
        "tfoot",
        "option",
        "optgroup",
        "rt",
        "rp",
        "colgroup",
        "caption",
    ]
)
_RAW_TEXT = frozenset({"script", "style", "textarea", "title", "xmp", "noscript"})
#: C0 controls other than tab, LF, CR and FF, and DEL: XML forbids them, and lxml keeps them in
#: text, so a single one makes trafilatura drop a page's whole main text.
_CONTROLS = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f]+")


def bound_markup(
    html: str, max_elements: int = MAX_ELEMENTS, max_depth: int = MAX_DEPTH
) -> tuple[str, bool]:
    """Cut `html` before the element that exceeds the element or depth bound; say if it did."""
    lower: str | None = None
    pos = elements = depth = 0
    while True:
        match = _TAG.search(html, pos)
        if match is None:
            return html, False
        if match.group(1):
            end = html.find("-->", match.end())
            if end < 0:
                return html, False
            pos = end + 3
            continue
        closing, name, self_closing = match.group(2), match.group(3).lower(), match.group(4)
        pos = match.end()
        if closing:
            if name not in _VOID and name not in _OPTIONAL_END:
                depth = max(0, depth - 1)
            continue
        elements += 1
        if elements > max_elements:
            return html[: match.start()], True
        if name in _RAW_TEXT:
            lower = lower if lower is not None else html.lower()
            end = lower.find(f"</{name}", pos)
            if end < 0:
                return html, False
            pos = end
        elif name not in _VOID and name not in _OPTIONAL_END and not self_closing:
            depth += 1
            if depth > max_depth:
                return html[: match.start()], True


def parse_html(html: str) -> lxml.html.HtmlElement | None:
    """Parse markup with lxml (no network, no entities resolved), or None when there is none.

    Control characters are dropped first: they are never text, and trafilatura cannot copy them.
    """
    html = _XML_DECLARATION.sub("", html, count=1)
    html = _CONTROLS.sub("", html).replace("\x0c", " ")
    if not html.strip():
        return None
    parser = lxml.html.HTMLParser(no_network=True, remove_comments=True, remove_pis=True)
    try:
        return lxml.html.fromstring(html, parser=parser)
    except (etree.ParserError, ValueError):
        return None
