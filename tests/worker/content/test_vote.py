"""The vote of trafilatura, readability-lxml and Resiliparse on each line of a page."""

import lxml.html
import pytest

from worker.content import vote
from worker.content.headings import Headings
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


def words(n: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


class TestVoter:
    """Whether an extractor's text holds a line: its trigrams, or all of a short line."""

    def test_most_trigrams_are_enough(self) -> None:
        line = words(10).split()  # 8 trigrams: 7 of them (0.875) pass LINE_SHARE 0.8, 6 do not
        assert vote.Voter(words(9)).kept(line)
        assert not vote.Voter(words(8)).kept(line)

    def test_a_short_line_must_be_there_whole_on_word_boundaries(self) -> None:
        voter = vote.Voter("Home | Search the archive\nLocal news")
        assert voter.kept(["Home"]) and voter.kept(["Local", "news"])
        assert not voter.kept(["Hom"]) and not voter.kept(["news", "Local"])

    def test_an_empty_text_keeps_nothing(self) -> None:
        assert not vote.Voter("").kept(["a"])
        assert not vote.Voter("  \n ").kept(words(5).split())


class TestVotedLines:
    """readability and one other; trafilatura and Resiliparse together only on long lines;
    readability alone only on longer ones."""

    LONG_NAV = words(vote.WITHOUT_READABILITY_MIN_WORDS, "nav")
    SHORT_NAV = words(vote.WITHOUT_READABILITY_MIN_WORDS - 1, "nav")
    LONG_READ = words(vote.READABILITY_ALONE_MIN_WORDS, "r")
    SHORT_READ = words(vote.READABILITY_ALONE_MIN_WORDS - 1, "r")

    def _vote(self, lines: list[str], readability: str, *others: str) -> list[str]:
        return vote.voted_lines(lines, vote.Voter(readability), [vote.Voter(o) for o in others])

    def test_readability_and_one_other_keep_a_line(self) -> None:
        lines = ["Home", ARTICLE[0], ARTICLE[1], "Print this page"]
        kept = self._vote(lines, ARTICLE[0] + "\n" + ARTICLE[1], ARTICLE[0], ARTICLE[1])
        assert kept == [ARTICLE[0], ARTICLE[1]]

    def test_the_others_alone_need_a_long_line(self) -> None:
        both = f"{self.LONG_NAV}\n{self.SHORT_NAV}"
        assert self._vote([self.LONG_NAV, self.SHORT_NAV], "", both, both) == [self.LONG_NAV]
        assert self._vote([self.LONG_NAV], "", self.LONG_NAV, "") == []

    def test_readability_alone_needs_a_longer_line(self) -> None:
        text = f"{self.LONG_READ}\n{self.SHORT_READ}"
        assert self._vote([self.LONG_READ, self.SHORT_READ], text, "", "") == [self.LONG_READ]

    def test_blank_lines_go_kept_lines_are_stripped_order_stays(self) -> None:
        lines = ["", "   ", f"  {ARTICLE[2]} ", ARTICLE[0]]
        text = "\n".join(ARTICLE)
        assert self._vote(lines, text, text, "") == [ARTICLE[2], ARTICLE[0]]

    def test_no_lines_or_no_votes_keep_nothing(self) -> None:
        assert self._vote([], "x", "x", "x") == []
        assert self._vote(ARTICLE, "", "", "") == []


class TestVotedText:
    """The vote inside main_text."""

    def test_layout_links_dropped_article_kept(self) -> None:
        """On the table layout, the banner row only Resiliparse keeps is voted out, and the
        text is the page's lines, not trafilatura's rendering of the layout table."""
        text = main_text(tree(LAYOUT), "https://example.org/a")
        for paragraph in ARTICLE:
            assert paragraph in text
        assert "Search the archive" not in text
        assert "\\|" not in text and not text.startswith("|")

    def test_markup_serialised_when_not_given(self) -> None:
        page = tree(LAYOUT)
        assert main_text(page, None) == main_text(page, None, LAYOUT)

    def test_tree_left_unchanged(self) -> None:
        page = tree(LAYOUT)
        before = lxml.html.tostring(page)
        main_text(page, None)
        assert lxml.html.tostring(page) == before

    def test_large_trees_are_not_voted(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Past MAX_VOTE_ELEMENTS the text is trafilatura's, readability never runs."""
        filler = "<span></span>" * (vote.MAX_VOTE_ELEMENTS + 1)
        html = LAYOUT.replace("</table>", f"</table><div>{filler}</div>")
        monkeypatch.setattr(vote, "readability_text", lambda _: pytest.fail("readability ran"))
        text = "Home | Search the archive\n" + "\n".join(ARTICLE)
        assert vote.voted_text(text, tree(html), html) == text

    def test_no_line_voted_for_keeps_trafilatura_text(self) -> None:
        """Where the extractors agree on no line, trafilatura's own text stands."""
        page = "<html><body><nav><a href='/'>Home</a></nav></body></html>"
        assert vote.voted_text("Home", tree(page), page) == "Home"
        assert vote.voted_text("", tree(page), page) == ""
        # trafilatura read an image's alt text, which is no line of the page's text.
        image = "<html><body><img src='/a.png' alt='A dog asleep in the sun'></body></html>"
        assert vote.voted_text("A dog asleep in the sun", tree(image), image) == (
            "A dog asleep in the sun"
        )

    def test_page_without_text(self) -> None:
        page = "<html><body><img src='/a.png'></body></html>"
        assert vote.voted_text("", tree(page), page) == ""

    def test_page_without_a_body(self) -> None:
        """readability's summary of a page without a body is no fragment lxml will parse: it
        keeps nothing, and the page's text is empty, not an error."""
        assert vote.readability_text(tree("<html><head></head></html>")) == ""
        assert main_text(tree("<html><head></head></html>"), None) == ""

    def test_words_carrying_invisible_characters_are_voted_alike(self) -> None:
        """Resiliparse and readability keep zero-width, bidi and control characters that
        trafilatura's cleaned text has not: each text is cleaned alike before the vote."""
        dirty = (
            "The old\u200b stone\u00a0bridge\x07 was rebuilt\u202e in 1952\u202c after the war,"
            " and the\ufeff ferry that replaced it\u2067 for seven years\u2069 was retired."
        )
        page = f"<html><body><article><p>{dirty}</p><p>{ARTICLE[0]}</p></article></body></html>"
        clean = "The old stone bridge was rebuilt in 1952 after the war, and the ferry that "
        text = vote.voted_text(
            f"{clean}replaced it for seven years was retired.\n{ARTICLE[0]}", tree(page), page
        )
        assert text.split("\n")[0].startswith(clean)


class TestAgreement:
    """Where trafilatura and Resiliparse agree, readability is not asked."""

    def test_bag_of_words_f1(self) -> None:
        assert vote.agreement("a b c", "c b a") == 1.0
        assert vote.agreement("a b", "c d") == 0.0
        assert vote.agreement("a a b c", "a b") == pytest.approx(2 * 2 / 6)
        assert vote.agreement("", "") == 1.0
        assert vote.agreement("a", " \n") == 0.0

    def test_agreed_page_is_not_read_by_readability(self, monkeypatch: pytest.MonkeyPatch) -> None:
        page = (
            f"<html><body><article><p>{ARTICLE[0]}</p><p>{ARTICLE[1]}</p></article></body></html>"
        )
        monkeypatch.setattr(vote, "readability_text", lambda _: pytest.fail("readability ran"))
        text = "\n".join(ARTICLE[:2])
        assert vote.voted_text(text, tree(page), page) == text

    def test_disagreement_asks_readability(self, monkeypatch: pytest.MonkeyPatch) -> None:
        asked: list[bool] = []
        real = vote.readability_text

        def counting(page: lxml.html.HtmlElement) -> str:
            asked.append(True)
            return real(page)

        monkeypatch.setattr(vote, "readability_text", counting)
        paragraphs = "".join(f"<p>{p}</p>" for p in ARTICLE)
        page = f"<html><body><article>{paragraphs}</article></body></html>"
        # trafilatura kept one paragraph of three: readability settles the other two.
        assert vote.voted_text(ARTICLE[0], tree(page), page) == "\n".join(ARTICLE)
        assert asked == [True]


class TestHeadings:
    """A page's headings and titles, spaces collapsed."""

    PAGE = (
        "<html><head><title>Severn peaks | The Daily  Example</title>"
        "<meta property='og:title' content='Flood barriers hold'></head><body>"
        "<h1> Rivers\n come back </h1><h3>Related</h3><h4>Small print</h4><p>A paragraph</p>"
        "</body></html>"
    )

    def test_headings_whole_and_titles_in_part(self) -> None:
        headings = Headings(tree(self.PAGE))
        assert headings.holds("Rivers come back") and headings.holds("Related")
        assert headings.holds("Severn peaks") and headings.holds("The Daily Example")
        assert headings.holds("Flood barriers hold")

    def test_other_lines_are_not(self) -> None:
        headings = Headings(tree(self.PAGE))
        assert not headings.holds("Rivers come")  # part of a heading is not the heading
        assert not headings.holds("Small print") and not headings.holds("A paragraph")
        assert not headings.holds("")


class TestReadabilityArticle:
    """readability's lines another extractor kept, after the headline just before them."""

    HEADLINE = "Severn peaks just below its record"
    LINES = ["Home News", "", HEADLINE, "", *ARTICLE, "Comments"]
    HEADINGS = Headings(tree(f"<html><body><h1>{HEADLINE}</h1><p>x</p></body></html>"))
    TEXT = "\n".join(ARTICLE)

    def _article(self, lines: list[str], readability: str, *others: str) -> list[str]:
        voters = [vote.Voter(o) for o in others]
        return vote.readability_article(lines, readability, voters, self.HEADINGS)

    def test_headline_kept_by_another_comes_first(self) -> None:
        kept = self._article(self.LINES, f"\n {self.TEXT}\n\n", self.HEADLINE, self.TEXT)
        assert kept == [self.HEADLINE, *ARTICLE]

    def test_headline_no_other_kept_is_left_out(self) -> None:
        kept = self._article(self.LINES, self.TEXT, "Home News", self.TEXT)
        assert kept == ARTICLE

    def test_a_line_before_that_is_no_heading_is_left_out(self) -> None:
        """An advert just before an article whose headline readability kept is no headline."""
        lines = ["Buy one get one free today", self.HEADLINE, *ARTICLE]
        text = "\n".join([self.HEADLINE, *ARTICLE])
        kept = self._article(lines, text, "Buy one get one free today", text)
        assert kept == [self.HEADLINE, *ARTICLE]

    def test_only_the_line_just_before_counts(self) -> None:
        """The page line before the headline ('Home News') is never added, kept or not."""
        assert self._article(self.LINES, self.TEXT, "Home News", self.TEXT) == ARTICLE

    def test_lines_only_readability_kept_go(self) -> None:
        """A caption or a teaser neither trafilatura nor Resiliparse kept is left out, however
        long; one of them is enough to keep a line."""
        caption = words(40, "caption")
        text = "\n".join([ARTICLE[0], caption, ARTICLE[1], ARTICLE[2]])
        kept = self._article(self.LINES, text, ARTICLE[0], "\n".join(ARTICLE[1:]))
        assert kept == ARTICLE

    def test_text_no_page_line_holds(self) -> None:
        assert self._article(self.LINES, "w0 w1 w2 w3", self.HEADLINE, "w0 w1 w2 w3") == [
            "w0 w1 w2 w3"
        ]


class TestReadabilityTrusted:
    """Where readability's text agrees with trafilatura's, its lines another kept are the text."""

    COMMENT = (
        "I grew up on the quay and we never once saw the water this high in forty years, "
        "so well done to everyone who kept the barriers standing all night."
    )
    HEADLINE = "Severn peaks just below its record in Shrewsbury"
    PAGE = (
        "<html><body><nav><a href='/'>Home</a> <a href='/n'>News</a></nav>"
        f"<h1>{HEADLINE}</h1><article>"
        + "".join(f"<p>{p}</p>" for p in ARTICLE)
        + "</article><section class='comments'><h3>Comments</h3><div class='comment'><p>"
        + COMMENT
        + "</p><span>Posted by Ann on Wednesday 5 February at 09:12, reply, report this comment"
        "</span></div></section></body></html>"
    )

    def test_reader_comment_the_others_keep_is_dropped_headline_kept(self) -> None:
        """trafilatura and Resiliparse both keep a long reader comment, which the line vote
        would keep; readability (agreeing with trafilatura at 0.8) leaves it out, and the
        headline it also leaves out comes back from the page line before its text."""
        trafilatura_text = "\n".join([self.HEADLINE, *ARTICLE, self.COMMENT])
        text = vote.voted_text(trafilatura_text, tree(self.PAGE), self.PAGE)
        assert text == "\n".join([self.HEADLINE, *ARTICLE])

    def test_readability_disagreeing_is_only_a_voter(self) -> None:
        """Below READABILITY_TRUSTED the line vote decides: trafilatura's and Resiliparse's
        long comment line stays."""
        trafilatura_text = "\n".join([self.HEADLINE, self.COMMENT])
        text = vote.voted_text(trafilatura_text, tree(self.PAGE), self.PAGE)
        assert text == "\n".join([*ARTICLE, self.COMMENT])
