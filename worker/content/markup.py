"""Bound markup: pages with absurd element counts or nesting are cut before they are used.

`parse_bounded` parses once and lets libxml2 check the bounds on the tree (XPath, in C); only a
page that may break them is scanned tag by tag (`bound_markup`) and parsed again, cut.
"""

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


def within_bounds(
    tree: lxml.html.HtmlElement, max_elements: int = MAX_ELEMENTS, max_depth: int = MAX_DEPTH
) -> bool:
    """Whether a parsed page has at most `max_elements` elements and none deeper than `max_depth`.

    Both questions are asked in XPath, so libxml2 walks the tree without a Python object per
    element (the document element is depth 1).
    """
    root = tree.getroottree()
    if root.xpath("count(//*)") > max_elements:
        return False
    return not root.xpath(f"boolean(/*{'/*' * max_depth})")


def parse_bounded(
    html: str, max_elements: int = MAX_ELEMENTS, max_depth: int = MAX_DEPTH
) -> tuple[lxml.html.HtmlElement | None, bool]:
    """Parse `html` within the element and depth bounds: (tree or None, whether it was cut).

    A page with fewer `<` than `max_elements` is parsed at once; if its tree keeps both bounds it
    is used as it is. Otherwise (or when libxml2 gave up nesting at its own limit of 256) the tag
    scan decides where to cut, exactly as `bound_markup`, and the prefix is parsed.
    """
    if html.count("<") <= max_elements:
        tree = parse_html(html)
        if tree is None or within_bounds(tree, max_elements, max_depth):
            return tree, False
    bounded, cut = bound_markup(html, max_elements, max_depth)
    return parse_html(bounded), cut
