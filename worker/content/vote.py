"""A second, independent extractor's vote on trafilatura's main text, where trafilatura is unsure.

readability-lxml (Mozilla Readability's scoring, a different method from trafilatura's) reads the
page; each line trafilatura kept stays only if readability kept (almost) all of its words too.
The vote only removes lines, never adds text, so a page trafilatura finds nothing on stays as it
is, and it is skipped when readability keeps too little of trafilatura's text to be a judge.
Chosen and tuned on bench/data/extraction (dev split); see docs/extraction-quality.md.
"""

import copy
import re

import lxml.html
from lxml import etree
from readability import Document
from readability.readability import Unparseable

#: Main text shorter than this (characters) is "little text": trafilatura is unsure.
UNSURE_BELOW_CHARS = 1_500
#: Main text under this share of the page's visible text is "low density": unsure too.
UNSURE_BELOW_DENSITY = 0.5
#: Share of a line's words the other extractor must have kept for the line to stay.
LINE_VOTE = 0.9
#: When the vote would keep less than this share of trafilatura's text, readability missed the
#: article rather than trimmed its boilerplate: trafilatura's text stands.
MIN_KEPT_SHARE = 0.5
#: Pages with more elements than this are not voted on: readability's scoring walks the tree
#: several times, and the bounded parse allows far larger trees than articles need.
MAX_VOTE_ELEMENTS = 20_000
_WORD = re.compile(r"\w+")
_BLOCK_TAGS = ("p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "blockquote", "pre")
#: The page's visible text nodes, compiled once, as plain strings (lxml's default "smart"
#: strings each carry a reference to their element: a third of the cost, unused here).
_VISIBLE_TEXTS = etree.XPath(
    "//body//text()[not(ancestor::script or ancestor::style)]", smart_strings=False
)


def visible_chars(tree: lxml.html.HtmlElement) -> int:
    """Characters of the page's visible text (scripts and styles left out), spaces collapsed."""
    texts: list[str] = _VISIBLE_TEXTS(tree)  # type: ignore[assignment]
    return sum(len(" ".join(t.split())) for t in texts)


def is_unsure(text: str, tree: lxml.html.HtmlElement) -> bool:
    """Whether trafilatura's main text is little, or a low share of the page's text."""
    if len(text) < UNSURE_BELOW_CHARS:
        return True
    return len(text) < UNSURE_BELOW_DENSITY * visible_chars(tree)


def readability_text(tree: lxml.html.HtmlElement) -> str:
    """The article text readability-lxml finds in a copy of `tree` (it edits what it reads)."""
    try:
        summary = Document(copy.deepcopy(tree)).summary(html_partial=True)
    except Unparseable:
        return ""
    if not summary.strip():
        return ""
    fragment = lxml.html.fragment_fromstring(summary, create_parent="div")
    for element in fragment.iter("br", *_BLOCK_TAGS):
        element.tail = "\n" + (element.tail or "")
    return str(fragment.text_content())


def vote_lines(text: str, other: str) -> str:
    """`text` less the lines whose words `other` mostly lacks; `text` when too little is left."""
    words = set(_WORD.findall(other.lower()))
    if not words:
        return text
    kept = []
    for line in text.split("\n"):
        tokens = _WORD.findall(line.lower())
        if not tokens or sum(t in words for t in tokens) >= LINE_VOTE * len(tokens):
            kept.append(line)
    voted = "\n".join(kept)
    return voted if len(voted.strip()) >= MIN_KEPT_SHARE * len(text.strip()) else text


def second_opinion(text: str, tree: lxml.html.HtmlElement) -> str:
    """trafilatura's `text`, voted on by readability-lxml where trafilatura is unsure."""
    if not text or not is_unsure(text, tree):
        return text
    if sum(1 for _ in tree.iter()) > MAX_VOTE_ELEMENTS:
        return text
    return vote_lines(text, readability_text(tree))
