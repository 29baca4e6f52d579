# ruff: noqa: E501  (HTML templates read better unwrapped)
"""Render the hand-written articles into realistic pages with boilerplate, plus gold text files.

Every article is rendered with every template: `<slug>.html` with its original template (the
first set), `<slug>__<template>.html` with the others. Articles are split by slug: every third
one (HELD_OUT) is held out, so no held-out article's words are seen while tuning.

Run: .venv/bin/python -m bench.build_extraction_set  (writes bench/data/extraction/*.html|*.txt
and bench/data/extraction_split.json)
"""

import html
import json
from collections.abc import Callable
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "extraction"
#: Hand-written article bodies: slug, lang, title, blocks of (kind, value).
ARTICLES = json.loads((OUT.parent / "extraction_articles.json").read_text(encoding="utf-8"))
E = html.escape


def body_html(
    blocks: list[tuple[str, object]], between: Callable[[int], str] = lambda i: ""
) -> str:
    """Article blocks as HTML, with optional in-article boilerplate after block i."""
    parts = []
    for i, (kind, value) in enumerate(blocks):
        if kind == "p":
            parts.append(f"<p>{E(str(value))}</p>")
        elif kind == "h2":
            parts.append(f"<h2>{E(str(value))}</h2>")
        elif kind == "quote":
            parts.append(f"<blockquote><p>{E(str(value))}</p></blockquote>")
        elif kind in ("ul", "ol"):
            items = "".join(f"<li>{E(v)}</li>" for v in value)  # type: ignore[attr-defined]
            parts.append(f"<{kind}>{items}</{kind}>")
        elif kind == "table":
            rows = value  # type: ignore[assignment]
            head = "".join(f"<th>{E(c)}</th>" for c in rows[0])  # type: ignore[index]
            body = "".join(
                "<tr>" + "".join(f"<td>{E(c)}</td>" for c in row) + "</tr>"
                for row in rows[1:]  # type: ignore[index]
            )
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        parts.append(between(i))
    return "\n".join(p for p in parts if p)


def gold_text(blocks: list[tuple[str, object]]) -> str:
    """The main text a perfect extractor returns."""
    lines: list[str] = []
    for kind, value in blocks:
        if kind in ("ul", "ol"):
            lines.extend(value)  # type: ignore[arg-type]
        elif kind == "table":
            lines.extend(" ".join(row) for row in value)  # type: ignore[attr-defined]
        else:
            lines.append(str(value))
    return "\n".join(lines) + "\n"


NAV = "".join(
    f'<li><a href="/{n.lower()}">{n}</a></li>'
    for n in ("Home", "World", "Business", "Politics", "Science", "Culture", "Sport", "Weather")
)
COOKIE = (
    '<div id="cookie-banner" class="consent">We use cookies to improve your experience. '
    'By continuing you accept our <a href="/cookies">cookie policy</a>. <button>Accept all</button>'
    "<button>Manage settings</button></div>"
)
FOOTER = (
    '<footer class="site-footer"><div class="cols"><ul><li><a href="/about">About us</a></li>'
    '<li><a href="/contact">Contact</a></li><li><a href="/jobs">Careers</a></li></ul>'
    '<ul><li><a href="/terms">Terms of use</a></li><li><a href="/privacy">Privacy notice</a></li>'
    "</ul></div><p>© 2024 Example Media Group. All rights reserved. Registered in England.</p>"
    "</footer>"
)
COMMENTS = (
    '<section id="comments" class="comments-area"><h3>12 comments</h3><ol class="comment-list">'
    '<li class="comment"><div class="comment-author">Mark T.</div><div class="comment-content">'
    "<p>Great piece, thanks for writing it. I shared it with my whole family.</p></div></li>"
    '<li class="comment"><div class="comment-author">anon</div><div class="comment-content">'
    "<p>Totally disagree with the last part, the numbers do not add up at all.</p></div></li>"
    '</ol><form class="comment-form"><textarea name="c"></textarea><button>Post comment</button>'
    "</form></section>"
)
RELATED = (
    '<aside class="related"><h3>You may also like</h3><ul>'
    '<li><a href="/a">Ten gadgets you will want this winter</a></li>'
    '<li><a href="/b">Why everyone is talking about the new budget</a></li>'
    '<li><a href="/c">Photos: the week in pictures</a></li></ul></aside>'
)
NEWSLETTER = (
    '<div class="newsletter-signup"><h4>Get our morning briefing</h4><p>The day\'s top stories, '
    'delivered free to your inbox every weekday.</p><input type="email" placeholder="Your email">'
    "<button>Sign up</button></div>"
)
SHARE = (
    '<div class="share-bar"><span>Share this article</span><a href="#">Facebook</a>'
    '<a href="#">Twitter</a><a href="#">WhatsApp</a><a href="#">Copy link</a></div>'
)


def head(a: dict[str, object], extra: str = "") -> str:
    """A realistic <head>."""
    return (
        f'<!DOCTYPE html><html lang="{a["lang"]}"><head><meta charset="utf-8">'
        f"<title>{E(str(a['title']))} | Example Media</title>"
        f'<meta name="description" content="{E(str(a["title"]))}">'
        '<meta name="viewport" content="width=device-width">'
        '<link rel="stylesheet" href="/main.css"><script async src="/analytics.js"></script>'
        f"{extra}</head>"
    )


def news(a: dict[str, object]) -> str:
    """A news site: nav, breadcrumb, figure, in-article read-more and newsletter, comments."""
    blocks = a["blocks"]  # type: ignore[assignment]

    def between(i: int) -> str:
        if i == 0:
            return '<p class="read-more"><strong>Read more:</strong> <a href="/x">Council budget row deepens</a></p>'
        if i == 2:
            return NEWSLETTER
        return ""

    return (
        head(a)
        + f'<body>{COOKIE}<header><div class="logo">Example News</div><nav><ul>{NAV}</ul></nav></header>'
        '<div class="breadcrumb"><a href="/">Home</a> › <a href="/uk">UK</a></div>'
        f'<main><article class="story"><h1>{E(str(a["title"]))}</h1>'
        '<div class="byline">By Staff Reporter · 5 min read · Updated 2 hours ago</div>'
        '<figure><img src="/img/1.jpg" alt=""><figcaption>Photo: Agency</figcaption></figure>'
        f'<div class="story-body">{body_html(blocks, between)}</div>{SHARE}'  # type: ignore[arg-type]
        '<ul class="tags"><li><a href="/t/1">Environment</a></li><li><a href="/t/2">Local</a></li></ul>'
        f"</article>{RELATED}{COMMENTS}</main>{FOOTER}</body></html>"
    )


def blog(a: dict[str, object]) -> str:
    """A WordPress-like blog: sidebar widgets, author box, comments."""
    blocks = a["blocks"]  # type: ignore[assignment]
    sidebar = (
        '<aside id="secondary" class="widget-area"><section class="widget"><h2 class="widget-title">'
        'Recent posts</h2><ul><li><a href="/p1">My favourite kitchen knives</a></li>'
        '<li><a href="/p2">A weekend in the Peak District</a></li></ul></section>'
        '<section class="widget"><h2 class="widget-title">Archives</h2><ul><li><a href="/2024/05">May 2024</a>'
        '</li><li><a href="/2024/04">April 2024</a></li></ul></section>'
        '<section class="widget"><h2 class="widget-title">Categories</h2><ul><li>Baking</li>'
        "<li>Travel</li></ul></section></aside>"
    )
    return (
        head(a)
        + '<body class="post-template"><div id="page"><header id="masthead"><p class="site-title">'
        '<a href="/">Crumbs and Journeys</a></p><p class="site-description">A blog about food and travel'
        f'</p><nav id="site-navigation"><ul>{NAV}</ul></nav></header><div id="content" class="site-content">'
        f'<div id="primary"><main id="main"><article class="post type-post hentry"><header class="entry-header">'
        f'<h1 class="entry-title">{E(str(a["title"]))}</h1><div class="entry-meta">Posted on 3 May 2024 by '
        f'<a href="/author/me">Alex</a></div></header><div class="entry-content">{body_html(blocks)}</div>'  # type: ignore[arg-type]
        f'<footer class="entry-footer">Posted in <a href="/c/1">Notes</a>{SHARE}</footer></article>'
        '<div class="author-bio"><h3>About Alex</h3><p>Alex writes about bread, trains and small towns, '
        "and lives in Leeds with two cats.</p></div>"
        '<nav class="post-navigation"><a href="/prev">Previous post</a><a href="/next">Next post</a></nav>'
        f"{COMMENTS}</main></div>{sidebar}</div>{FOOTER}</div></body></html>"
    )


def docs(a: dict[str, object]) -> str:
    """A documentation page: long nav tree, breadcrumbs, feedback widget, prev/next."""
    blocks = a["blocks"]  # type: ignore[assignment]
    tree = "".join(
        f'<li><a href="/docs/{i}">{t}</a></li>'
        for i, t in enumerate(
            [
                "Overview",
                "Quick start",
                "Installation",
                "Configuration",
                "Command reference",
                "Plugins",
                "Troubleshooting",
                "FAQ",
                "Release notes",
                "Contributing",
            ]
        )
    )
    return (
        head(a)
        + f'<body><div class="topbar"><a href="/">Docs</a><input placeholder="Search docs"></div>'
        f'<div class="layout"><nav class="sidebar-nav"><ul>{tree}</ul></nav><div class="doc-main">'
        '<div class="breadcrumbs"><a href="/docs">Docs</a> / <a href="/docs/guide">Guide</a></div>'
        f'<div role="main" class="document"><h1>{E(str(a["title"]))}</h1>{body_html(blocks)}</div>'  # type: ignore[arg-type]
        '<div class="feedback">Was this page helpful? <button>Yes</button><button>No</button></div>'
        '<a class="edit" href="/edit">Edit this page on GitHub</a><div class="prev-next">'
        '<a href="/p">« Quick start</a><a href="/n">Configuration »</a></div></div></div>'
        f"{FOOTER}</body></html>"
    )


def soup(a: dict[str, object]) -> str:
    """Div soup: no semantic tags, promos, trending list, cookie banner."""
    blocks = a["blocks"]  # type: ignore[assignment]
    return (
        head(a)
        + f'<body><div class="wrap">{COOKIE}<div class="top"><div class="menu">'
        + " | ".join(f'<a href="/{n}">{n}</a>' for n in ("News", "Video", "Opinion", "Shop"))
        + '</div></div><div class="row"><div class="col-left"><div class="trending"><b>Trending</b>'
        '<div><a href="/t1">Celebrity wedding photos</a></div><div><a href="/t2">Lottery results</a></div>'
        f'</div></div><div class="col-main"><div class="headline">{E(str(a["title"]))}</div>'
        '<div class="date">Published 12:04</div><div class="content-main">'
        f"{body_html(blocks)}</div>"  # type: ignore[arg-type]
        '<div class="promo">Subscribe now and get 3 months for 1 euro! Cancel any time.</div>'
        f'</div><div class="col-right">{NEWSLETTER}</div></div>{FOOTER}</div></body></html>'
    )


def magazine(a: dict[str, object]) -> str:
    """A magazine page: ad slots and related cards between paragraphs, JSON-LD."""
    blocks = a["blocks"]  # type: ignore[assignment]

    def between(i: int) -> str:
        if i % 2 == 1:
            return (
                '<div class="ad-slot" data-ad="mid"><span>Advertisement</span>'
                "<p>Continue reading below</p></div>"
            )
        if i == 2:
            return (
                '<div class="inline-related"><span>Related</span><a href="/r">The best winter coats '
                "for every budget</a></div>"
            )
        return ""

    ld = (
        '<script type="application/ld+json">{"@type":"NewsArticle","headline":"'
        + E(str(a["title"]))
        + '"}</script>'
    )
    return (
        head(a, ld) + f'<body><header class="mag-header"><nav><ul>{NAV}</ul></nav></header>'
        f'<main><article><header><h1>{E(str(a["title"]))}</h1><p class="dek">Our pick of the week</p>'
        '</header><div class="article-body">'
        f"{body_html(blocks, between)}</div></article>"  # type: ignore[arg-type]
        f"{RELATED}</main>{FOOTER}</body></html>"
    )


def br_blocks(blocks: list[tuple[str, object]]) -> str:
    """Article blocks as one run of text separated by <br>, as old CMS templates write them."""
    parts = []
    for kind, value in blocks:
        if kind in ("ul", "ol"):
            parts.append("<br>".join(f"&bull; {E(v)}" for v in value))  # type: ignore[attr-defined]
        elif kind == "table":
            parts.append("<br>".join(E(" ".join(row)) for row in value))  # type: ignore[attr-defined]
        elif kind == "h2":
            parts.append(f"<b>{E(str(value))}</b>")
        else:
            parts.append(E(str(value)))
    return "<br><br>\n".join(parts)


def brtext(a: dict[str, object]) -> str:
    """A table-layout CMS page: text in one cell separated by <br>, a link column beside it."""
    blocks = a["blocks"]  # type: ignore[assignment]
    links = "".join(
        f'<tr><td class="navlink"><a href="/s{i}">{n}</a></td></tr>'
        for i, n in enumerate(
            ("Front page", "Local news", "Sport", "Notices", "Archive", "Contact")
        )
    )
    return (
        head(a) + '<body><table width="100%" class="layout"><tr><td colspan="2" class="banner">'
        '<img src="/banner.gif" alt="Town Gazette"> <a href="/">Home</a> | <a href="/search">Search</a>'
        f'</td></tr><tr><td class="left" valign="top"><table>{links}</table></td>'
        f'<td class="text" valign="top"><font size="4"><b>{E(str(a["title"]))}</b></font><br><br>'
        f"{br_blocks(blocks)}<br><br>"  # type: ignore[arg-type]
        '<a href="/print">Print this page</a> | <a href="/mail">Email to a friend</a></td></tr>'
        '<tr><td colspan="2" class="foot">Copyright Town Gazette. Webmaster: <a href="mailto:w@x">'
        "w@x</a></td></tr></table></body></html>"
    )


def cards(a: dict[str, object]) -> str:
    """A script-rendered page: generated class names, every paragraph a div, card grids."""
    blocks = a["blocks"]  # type: ignore[assignment]
    body = body_html(blocks).replace("<p>", '<div class="sc-1q2w3e"><span>')  # type: ignore[arg-type]
    body = body.replace("</p>", "</span></div>")
    grid = "".join(
        f'<div class="sc-9x8y"><a href="/c{i}"><div class="sc-t1">{t}</div>'
        '<div class="sc-m2">3 min read</div></a></div>'
        for i, t in enumerate(
            (
                "Inside the race to build cheaper batteries",
                "The town that banned cars for a summer",
                "What your sleep tracker is not telling you",
                "Ten questions about the new school year",
            )
        )
    )
    most_read = "".join(
        f'<li class="sc-l"><span>{i + 1}</span><a href="/m{i}">{t}</a></li>'
        for i, t in enumerate(
            ("Markets fall on rate fears", "Storm warning for the coast", "Star quits show")
        )
    )
    return (
        head(a)
        + f'<body><div id="__next"><div class="sc-hdr">{COOKIE}<div class="sc-nav">'
        + "".join(f'<a class="sc-n" href="/{n}">{n}</a>' for n in ("News", "Money", "Life", "Tech"))
        + f'</div></div><div class="sc-main"><div class="sc-h1">{E(str(a["title"]))}</div>'
        '<div class="sc-meta">By Newsroom · 4 min read</div>'
        f'<div class="sc-body">{body}</div><div class="sc-share">{SHARE}</div>'
        f'<div class="sc-grid"><div class="sc-gh">More for you</div>{grid}</div></div>'
        f'<div class="sc-side"><div class="sc-mr">Most read</div><ol>{most_read}</ol></div>'
        f"{FOOTER}</div></body></html>"
    )


def brief(a: dict[str, object]) -> str:
    """A news brief: the article's first two blocks only, in a page of heavy boilerplate."""
    return news({**a, "blocks": a["blocks"][:2]})  # type: ignore[index]


def discussed(a: dict[str, object]) -> str:
    """A short article under a comment thread longer than itself."""
    blocks = a["blocks"]  # type: ignore[assignment]
    thread = "".join(
        f'<li class="comment"><div class="comment-author">{who}</div><div class="comment-body">'
        f"<p>{E(text)}</p></div></li>"
        for who, text in (
            ("river_rat", "I have lived here thirty years and never seen anything like it."),
            ("J. Okafor", "The council knew about this for years and did nothing about it."),
            ("mpk", "Does anyone know whether the car park by the station is open again?"),
            ("Sam", "Thanks for the clear write-up, it is hard to find good local reporting."),
            ("anon", "Typical. Everyone complains and then nobody turns up to the meetings."),
            ("Leila", "My neighbour says the same thing happened in 2007 and again in 2014."),
        )
    )
    return (
        head(a) + f'<body><header><nav><ul>{NAV}</ul></nav></header><main><article class="post">'
        f'<h1>{E(str(a["title"]))}</h1><div class="post-body">{body_html(blocks)}</div>'  # type: ignore[arg-type]
        f'</article><section class="discussion"><h2>Join the discussion</h2><ol>{thread}</ol>'
        f"</section></main>{FOOTER}</body></html>"
    )


TEMPLATES = [news, blog, docs, soup, magazine]
#: Layouts added for the second set: where trafilatura's precision mode tends to be unsure.
HARD_TEMPLATES = [brtext, cards, brief, discussed]
#: Every third article (by position) is held out from tuning.
HELD_OUT = frozenset(str(a["slug"]) for i, a in enumerate(ARTICLES) if i % 3 == 2)


def gold_blocks(template: Callable[[dict[str, object]], str], a: dict[str, object]) -> object:
    """The blocks a template shows of an article (a brief shows two)."""
    return a["blocks"][:2] if template is brief else a["blocks"]  # type: ignore[index]


def build() -> int:
    """Write every page, its gold text and the split; return how many pages were written."""
    OUT.mkdir(parents=True, exist_ok=True)
    written = 0
    split: dict[str, str] = {}
    for i, article in enumerate(ARTICLES):
        own = TEMPLATES[i % len(TEMPLATES)]
        slug = str(article["slug"])
        for template in [own] + [t for t in TEMPLATES + HARD_TEMPLATES if t is not own]:
            name = slug if template is own else f"{slug}__{template.__name__}"
            (OUT / f"{name}.html").write_text(template(article), encoding="utf-8")
            gold = gold_text(gold_blocks(template, article))  # type: ignore[arg-type]
            (OUT / f"{name}.txt").write_text(gold, encoding="utf-8")
            split[name] = "held_out" if slug in HELD_OUT else "dev"
            written += 1
    (OUT.parent / "extraction_split.json").write_text(
        json.dumps(split, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    return written


if __name__ == "__main__":
    print(f"wrote {build()} pages to {OUT}")
