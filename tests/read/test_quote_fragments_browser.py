"""Text-fragment links in a real browser: headless Chromium opens the links the verify route
answered, against the loopback page the worker retrieved, and scrolls to the quoted passage.

Chromium activates text fragments on a WebDriver navigation (it counts as browser-initiated, like
a typed URL); the page is long enough to scroll, each paragraph has an id, and the test reads
off the rendered page which paragraph is in view and how far the page scrolled.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Env
from tests.support.browser import Browser
from tests.support.factories import Api
from tests.support.read_client import ReadApi
from tests.support.services import wait_for
from tests.support.tls_site import TLSSite
from worker.content.quotes.fragments import fragment_url

pytestmark = pytest.mark.usefixtures("services")

PAGE = Path(__file__).resolve().parents[1] / "fixtures" / "quotes" / "lake_report.html"
#: The loopback site's certificate comes from the suite's own CA (trustme).
FLAGS = ("--ignore-certificate-errors",)
#: Where the page is scrolled, and which paragraph shows where (px from the viewport's top).
VIEW = """
const rect = id => { const r = document.getElementById(id).getBoundingClientRect();
                     return [r.top, r.bottom]; };
const ids = [...document.querySelectorAll('article p[id]')].map(p => p.id);
return {scrollY: window.scrollY, height: window.innerHeight,
        directive: 'fragmentDirective' in document,
        rects: Object.fromEntries(ids.map(id => [id, rect(id)]))};
"""
REPEATED = "The water was clear and cold."


def in_view(view: dict[str, Any], paragraph: str) -> bool:
    top, bottom = view["rects"][paragraph]
    return bool(bottom > 0 and top < view["height"])


def scrolled_to(browser: Browser, url: str) -> dict[str, Any]:
    """Open `url` and wait for the page to settle where the fragment scrolled it."""
    browser.open("about:blank")
    browser.open(url)
    wait_for(lambda: browser.run(VIEW)["scrollY"] > 0, timeout=10, interval=0.1)
    last: list[float] = []

    def settled() -> bool:  # smooth scrolling, if any, has stopped
        last.append(browser.run(VIEW)["scrollY"])
        return len(last) > 2 and last[-1] == last[-2]

    wait_for(settled, timeout=10, interval=0.2)
    view: dict[str, Any] = browser.run(VIEW)
    return view


def test_fragment_links_scroll_to_the_quote(
    api: Api, site: TLSSite, workspace: uuid.UUID, env: Env
) -> None:
    """A unique quote, a repeated one (first and second place: prefix and suffix), a quote across
    paragraphs (textStart,textEnd) and one with typographic characters: each link scrolls its
    paragraph into view, and away from the top of the page."""
    read = ReadApi(api)
    url = site.page(f"/fragments/{uuid.uuid4().hex}/lakes", PAGE.read_bytes())
    done = read.retrieve(url, workspace)
    ref = {"evidence_id": done["evidence"]["evidence_id"]}
    quotes = {
        "p9": "half of the deep lakes in the survey could have oxygen-free bottom water",
        "p4": REPEATED,
        "p7": "There are local factors too. Runoff from pastures carries nutrients into some of "
        "the lakes, feeding algae; when the algae die and sink, their decomposition consumes "
        "oxygen at the bottom. \u201cIt is a double squeeze,\u201d Brunner says, \u201cwarmer "
        "water holds less oxygen, and more of what it holds is used up.\u201d Not every lake",
        "p12": "\u201cAeration treats the symptom,\u201d she says.",
    }
    payload = {
        "workspace_id": str(workspace),
        "quotes": [{**ref, "quote": q} for q in quotes.values()],
    }
    answers = read.ok("evidence/quotes/verify", payload)["result"]["quotes"]
    links = {p: a["fragment_url"] for p, a in zip(quotes, answers, strict=True)}
    assert all(a["match"] in ("exact", "normalized") for a in answers), answers
    assert "-," in links["p4"] and ",-" in links["p4"], "a repeated passage has context"
    assert links["p7"].count(",") == 1, "a long passage is textStart,textEnd"
    text = read.api.evidence(ref["evidence_id"]).json()["evidence"]["text"]
    second = text.index(REPEATED, text.index(REPEATED) + 1)
    links["p8"] = fragment_url(url, text, second, second + len(REPEATED))
    with Browser(env.tmp / "chromium-fragments.log", FLAGS) as browser:
        browser.open(url)
        top = browser.run(VIEW)
        assert top["scrollY"] == 0 and top["directive"], "Chromium supports text fragments"
        assert not in_view(top, "p9"), "the page is long enough to scroll"
        for paragraph, link in links.items():
            view = scrolled_to(browser, link)
            assert in_view(view, paragraph), (paragraph, link, view["scrollY"])
        first = scrolled_to(browser, links["p4"])
        assert in_view(first, "p4") and not in_view(first, "p8")
        again = scrolled_to(browser, links["p8"])
        assert in_view(again, "p8") and not in_view(again, "p4")
        # A link to text the page does not have leaves the page at its top.
        browser.open("about:blank")
        browser.open(url + "#:~:text=glaciers%20retreated%20faster")
        assert browser.run(VIEW)["scrollY"] == 0
