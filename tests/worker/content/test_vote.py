"""readability-lxml's vote on trafilatura's main text where trafilatura is unsure."""

import lxml.html

from worker.content import vote
from worker.content.html import main_text
from worker.content.markup import parse_html

ARTICLE = [
    "The river Severn peaked at 5.6 metres in Shrewsbury on Tuesday night, just below the "
    "record set in 2000, as temporary barriers held back the water along the quay.",
    "Environment Agency staff worked through the night to pump water from low-lying streets, "
    "and about forty homes were evacuated as a precaution.",
    "Forecasters expect another band of heavy rain on Friday, which could bring levels back up "
    "over the weekend, and the council has opened a rest centre.",
]
#: A table-layout page: trafilatura takes the layout table's link row with the article.
LAYOUT = (
    "<html lang='en'><body><table><tr><td colspan='2'><a href='/'>Home</a> | "
    "<a href='/s'>Search the archive</a></td></tr><tr><td><a href='/n'>Local news</a></td>"
    "<td class='text'>" + "<br><br>".join(ARTICLE) + "<br><br><a href='/p'>Print this page</a>"
    " | <a href='/m'>Email to a friend</a></td></tr></table></body></html>"
)


def tree(html: str) -> lxml.html.HtmlElement:
    parsed = parse_html(html)
    assert parsed is not None
    return parsed


class TestVoteLines:
    """Line-level vote: only removes, and stands down when the judge missed the article."""

    def test_lines_the_other_lacks_are_dropped(self) -> None:
        text = "Home | Search\n" + "\n".join(ARTICLE)
        assert vote.vote_lines(text, " ".join(ARTICLE)) == "\n".join(ARTICLE)

    def test_a_line_mostly_kept_by_the_other_stays(self) -> None:
        """A line with 9 of its 10 words in the other text stays (LINE_VOTE 0.9)."""
        line = "one two three four five six seven eight nine ten"
        assert vote.vote_lines(line, "one two three four five six seven eight nine") == line

    def test_nothing_from_the_other_keeps_the_text(self) -> None:
        assert vote.vote_lines("\n".join(ARTICLE), "") == "\n".join(ARTICLE)

    def test_too_little_left_keeps_the_text(self) -> None:
        """When the vote would keep under half the text, the other extractor missed the
        article: trafilatura's text stands."""
        text = "\n".join(ARTICLE)
        assert vote.vote_lines(text, "Home Search") == text


class TestUnsure:
    """Little text or low text density make trafilatura unsure."""

    def test_little_text(self) -> None:
        assert vote.is_unsure("short", tree("<p>short</p>"))

    def test_long_dense_text_is_sure(self) -> None:
        long = "word " * 400
        assert not vote.is_unsure(long.strip(), tree(f"<html><body><p>{long}</p></body></html>"))

    def test_low_density(self) -> None:
        """Long main text that is a small share of the page's visible text is unsure."""
        long, noise = "word " * 400, "<li><a href='/x'>other link text here</a></li>" * 400
        page = tree(f"<html><body><p>{long}</p><ul>{noise}</ul></body></html>")
        assert vote.is_unsure(long.strip(), page)

    def test_scripts_are_not_visible_text(self) -> None:
        page = tree("<html><body><p>abc</p><script>var x = 1;</script></body></html>")
        assert vote.visible_chars(page) == 3


class TestSecondOpinion:
    """The vote inside main_text."""

    def test_layout_links_dropped_article_kept(self) -> None:
        """On the table layout, the vote drops the banner row trafilatura kept as a line."""
        text = main_text(tree(LAYOUT), "https://example.org/a")
        for paragraph in ARTICLE:
            assert paragraph in text
        assert "Search the archive" not in text

    def test_tree_left_unchanged(self) -> None:
        page = tree(LAYOUT)
        before = lxml.html.tostring(page)
        main_text(page, None)
        assert lxml.html.tostring(page) == before

    def test_large_trees_are_not_voted(self) -> None:
        """Past MAX_VOTE_ELEMENTS the text is trafilatura's, readability never runs."""
        filler = "<span></span>" * (vote.MAX_VOTE_ELEMENTS + 1)
        page = tree(LAYOUT.replace("</table>", f"</table><div>{filler}</div>"))
        text = "Home | Search the archive\n" + "\n".join(ARTICLE)
        assert vote.second_opinion(text, page) == text

    def test_empty_text_stays_empty(self) -> None:
        """The vote never adds text: a page trafilatura finds nothing on stays empty."""
        assert vote.second_opinion("", tree(LAYOUT)) == ""
