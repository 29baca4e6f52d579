"""A page's headings and titles, to tell its headline among the lines of its text."""

import lxml.html

from worker.content.text import clean_text


def _one_line(text: str) -> str:
    return " ".join(clean_text(text).split())


class Headings:
    """The page's `<h1>`-`<h3>` texts and its titles (`<title>`, og:title), each on one line."""

    def __init__(self, tree: lxml.html.HtmlElement) -> None:
        self._headings = {_one_line(e.text_content()) for e in tree.iter("h1", "h2", "h3")}
        titles = [e.text_content() for e in tree.iter("title")]
        titles += [str(t) for t in tree.xpath("//meta[@property='og:title']/@content")]
        self._titles = "\n".join(_one_line(t) for t in titles)

    def holds(self, line: str) -> bool:
        """Whether `line` (one line, spaces collapsed) is a heading or part of a title."""
        return bool(line) and (line in self._headings or line in self._titles)
