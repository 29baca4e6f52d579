"""Page text by vote: three independent extractors vote on each line of the page's text.

trafilatura, readability-lxml (Mozilla Readability's scoring) and Resiliparse's main-content
extractor each read the page; each line of the page's whole visible text (Resiliparse's
rendering, in page order) is kept when two of them kept it, with readability's vote weighing
most: it is the best single judge on the public benchmarks, and lines that only trafilatura and
Resiliparse keep are mostly link lists (kept only when long), while a long line readability
alone keeps is mostly article. An extractor keeps a line when most of the line's word trigrams
are in its text (for lines of one or two words, the whole line). A line-level form of the
majority vote that led the web content extraction benchmark (Bevendorff et al., 2023).

Where readability's text agrees with trafilatura's, its lines that trafilatura or Resiliparse
kept too are the page's text, with the headline before them when readability left that out:
there the vote only added what the two others share (reader comments, teaser lists). The vote
decides where readability disagrees (it picked the wrong block). Chosen and tuned on the
development split of the public benchmarks in bench/quality (see docs/extraction-quality.md).
"""

import copy
from collections import Counter

import lxml.html
from readability import Document
from readability.readability import Unparseable
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

from worker.content.headings import Headings
from worker.content.text import clean_text

#: Share of a line's word trigrams an extractor's text must hold for it to vote for the line.
LINE_SHARE = 0.8
#: Words a line needs to stay on trafilatura's and Resiliparse's votes without readability's.
WITHOUT_READABILITY_MIN_WORDS = 15
#: Words a line needs to stay on readability's vote alone.
READABILITY_ALONE_MIN_WORDS = 30
#: When trafilatura's and Resiliparse's texts agree this well (bag-of-words F1), readability is
#: not asked (it costs most of the vote's CPU) and the lines both kept stand: on the development
#: pages a third of them, for 0.1 point of F1.
AGREED = 0.95
#: When readability's text agrees this well with trafilatura's (bag-of-words F1), its lines
#: another kept are the page's text, its headline added (`readability_article`): on the
#: development pages the vote lost to readability alone wherever both agreed (their long reader
#: comments and teaser lists), and won where readability picked the wrong block, which its
#: disagreement shows.
READABILITY_TRUSTED = 0.5
#: Pages with more elements than this are not voted on (trafilatura's text stands):
#: readability's scoring walks the tree several times, and the bounded parse allows far larger
#: trees than articles need.
MAX_VOTE_ELEMENTS = 20_000
_BLOCK_TAGS = ("p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "blockquote", "pre")


class Voter:
    """One extractor's text, indexed to say whether it kept a given line."""

    def __init__(self, text: str) -> None:
        tokens = text.split()
        self._joined = f" {' '.join(tokens)} "
        self._trigrams = set(_trigrams(tokens))

    def kept(self, line_tokens: list[str]) -> bool:
        """Whether this text holds the line: LINE_SHARE of its trigrams, or all of a short one."""
        if len(line_tokens) < 3:
            return f" {' '.join(line_tokens)} " in self._joined
        grams = _trigrams(line_tokens)
        return sum(g in self._trigrams for g in grams) >= LINE_SHARE * len(grams)


def _trigrams(tokens: list[str]) -> list[tuple[str, str, str]]:
    return list(zip(tokens, tokens[1:], tokens[2:], strict=False))


def voted_lines(lines: list[str], readability: Voter, others: list[Voter]) -> list[str]:
    """The non-blank `lines` (stripped) the vote keeps, in order.

    A line stays when readability and one of `others` kept it; when all `others` kept it and
    it has WITHOUT_READABILITY_MIN_WORDS words; or when readability kept it and it has
    READABILITY_ALONE_MIN_WORDS words.
    """
    kept = []
    for line in lines:
        tokens = line.split()
        if not tokens:
            continue
        by_readability = readability.kept(tokens)
        by_others = sum(v.kept(tokens) for v in others)
        if (
            (by_readability and by_others)
            or (by_others == len(others) and len(tokens) >= WITHOUT_READABILITY_MIN_WORDS)
            or (by_readability and len(tokens) >= READABILITY_ALONE_MIN_WORDS)
        ):
            kept.append(line.strip())
    return kept


def readability_article(
    lines: list[str], readability: str, others: list[Voter], headings: Headings
) -> list[str]:
    """readability's lines that one of `others` kept too (stripped), after the page's line just
    before its first one when that line is the headline (a heading or part of the title, which
    readability often leaves out) and one of `others` kept it."""
    article = [
        line.strip()
        for line in readability.split("\n")
        if line.split() and any(v.kept(line.split()) for v in others)
    ]
    voter, previous = Voter(readability), None
    for line in lines:
        tokens = line.split()
        if not tokens:
            continue
        if voter.kept(tokens):
            break
        previous = tokens
    else:
        return article  # no line of the page is readability's: nothing precedes its text
    if previous is None or not any(v.kept(previous) for v in others):
        return article
    headline = " ".join(previous)
    return [headline, *article] if headings.holds(headline) else article


def agreement(text: str, other: str) -> float:
    """Bag-of-words F1 between two texts (1 when both are empty)."""
    words, other_words = Counter(text.split()), Counter(other.split())
    total = words.total() + other_words.total()
    return 2 * (words & other_words).total() / total if total else 1.0


def readability_text(tree: lxml.html.HtmlElement) -> str:
    """The article text readability-lxml finds in a copy of `tree` (it edits what it reads)."""
    try:
        summary = Document(copy.deepcopy(tree)).summary(html_partial=True)
        if not summary.strip():
            return ""
        fragment = lxml.html.fragment_fromstring(summary, create_parent="div")
    except (Unparseable, AssertionError, ValueError):
        # Unparseable; lxml's assertion on a summary without a body (a page without one); a
        # text lxml refuses (control characters).
        return ""
    for element in fragment.iter("br", *_BLOCK_TAGS):
        element.tail = "\n" + (element.tail or "")
    return str(fragment.text_content())


def resiliparse_texts(html: str) -> tuple[list[str], str]:
    """The page's whole visible text as lines, and Resiliparse's main-content text."""
    parsed = HTMLTree.parse(html)
    whole = extract_plain_text(
        parsed,
        main_content=False,
        preserve_formatting=True,
        list_bullets=False,
        links=False,
        alt_texts=False,
        noscript=False,
        form_fields=False,
    )
    return str(whole).split("\n"), str(extract_plain_text(parsed, main_content=True))


def voted_text(trafilatura_text: str, tree: lxml.html.HtmlElement, html: str) -> str:
    """The page's lines that trafilatura, readability-lxml and Resiliparse vote for.

    Where trafilatura and Resiliparse agree (AGREED), the lines both kept stand without asking
    readability; where readability agrees with trafilatura (READABILITY_TRUSTED), its lines
    another kept stand, with the page's headline before them when readability left that out.
    trafilatura's text stands for pages too large to vote on, and where no line is voted for
    (the extractors disagree entirely: then trafilatura's own choice is the best left).
    """
    if sum(1 for _ in tree.iter()) > MAX_VOTE_ELEMENTS:
        return trafilatura_text
    lines, resiliparse_main = resiliparse_texts(html)
    if not any(line.strip() for line in lines):
        return trafilatura_text  # no text to vote on: readability need not run
    # Every text cleaned alike (invisible and control characters out), so that a word
    # carrying one reads the same in each: the texts are untrusted, the votes compare words.
    lines = clean_text("\n".join(lines)).split("\n")
    trafilatura_clean, resiliparse_clean = (
        clean_text(trafilatura_text),
        clean_text(resiliparse_main),
    )
    others = [Voter(trafilatura_clean), Voter(resiliparse_clean)]
    if agreement(trafilatura_clean, resiliparse_clean) >= AGREED:
        kept = [
            line.strip()
            for line in lines
            if line.split() and all(v.kept(line.split()) for v in others)
        ]
    else:
        readability = clean_text(readability_text(tree))
        if readability.strip() and agreement(trafilatura_clean, readability) >= READABILITY_TRUSTED:
            kept = readability_article(lines, readability, others, Headings(tree))
        else:
            kept = voted_lines(lines, Voter(readability), others)
    return "\n".join(kept) or trafilatura_text
