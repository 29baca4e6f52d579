"""Deterministic, realistic article pages (and caption files) for the throughput bench.

Page `i` is a full news/blog page: head with metadata, inline CSS and scripts, a cookie banner,
a navigation bar, the article (headings, paragraphs, a figure, sometimes a table or a list),
related links, sometimes comments, and a footer. Its text is drawn from the labelled
extraction set (bench/data/extraction/*.txt) in that page's language; sizes vary from a few
kilobytes to a few hundred, as real pages do. Every tenth page links a WebVTT caption track.
"""

from __future__ import annotations

import html
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "extraction"
ROBOTS_TXT = b"User-agent: *\nDisallow: /private/\nAllow: /\n"
CAPTION_EVERY = 10
SECTIONS = ["World", "Business", "Politics", "Science", "Culture", "Sport", "Travel", "Tech"]
_SENTENCE = re.compile(r"(?<=[.!?。])\s+")


@dataclass(frozen=True)
class Page:
    """One page of the fixture site."""

    index: int
    path: str
    body: bytes
    lang: str
    caption_path: str | None = None


@lru_cache
def corpus() -> list[tuple[str, list[str]]]:
    """(language, sentences) for every labelled text, in a fixed order."""
    out = []
    for text_file in sorted(DATA.glob("*.txt")):
        lang = text_file.stem.split("_", 1)[0]
        lines = text_file.read_text(encoding="utf-8").splitlines()
        sentences = [s.strip() for line in lines for s in _SENTENCE.split(line) if len(s) > 30]
        out.append((lang, sentences))
    return out


def _paragraph(rng: random.Random, sentences: list[str]) -> str:
    return html.escape(" ".join(rng.choice(sentences) for _ in range(rng.randint(2, 6))))


def _links(rng: random.Random, prefix: str, count: int) -> str:
    items = (
        f'<li class="menu-item"><a href="/{prefix}/{rng.randrange(10**6)}">'
        f"{rng.choice(SECTIONS)} {rng.randrange(1000)}</a></li>"
        for _ in range(count)
    )
    return "<ul>" + "".join(items) + "</ul>"


def _script(rng: random.Random, kilobytes: int) -> str:
    lines = (
        f"window.__cfg_{n}={{id:{rng.randrange(10**9)},slot:'ad-{n}',sizes:[[300,250],[728,90]]}};"
        for n in range(kilobytes * 12)
    )
    return "<script>" + "".join(lines) + "</script>"


def _style(rng: random.Random, rules: int) -> str:
    body = "".join(
        f".c{n}{{margin:{rng.randrange(24)}px;color:#{rng.randrange(16**6):06x}}}"
        for n in range(rules)
    )
    return f"<style>{body}</style>"


def _table(rng: random.Random) -> str:
    rows = "".join(
        f"<tr><td>{rng.choice(SECTIONS)}</td><td>{rng.randrange(1000)}</td>"
        f"<td>{rng.random():.2f}</td></tr>"
        for _ in range(rng.randint(3, 12))
    )
    return f"<table><thead><tr><th>Item</th><th>Count</th><th>Share</th></tr></thead>{rows}</table>"


def _article(rng: random.Random, sentences: list[str], title: str, paragraphs: int) -> str:
    parts = [f'<h1 class="headline">{title}</h1>']
    parts.append('<div class="byline">By Staff Reporter · <time>2026-03-01</time></div>')
    parts.append('<figure><img src="/img/lead.jpg" alt=""><figcaption>Photo: agency</figcaption>')
    parts.append("</figure>")
    for n in range(paragraphs):
        if n and n % 6 == 0:
            parts.append(f"<h2>{html.escape(rng.choice(sentences)[:60])}</h2>")
        parts.append(f"<p>{_paragraph(rng, sentences)}</p>")
        if n == paragraphs // 2 and rng.random() < 0.3:
            parts.append(_table(rng))
        if n == paragraphs // 3 and rng.random() < 0.3:
            items = "".join(f"<li>{html.escape(rng.choice(sentences))}</li>" for _ in range(4))
            parts.append(f"<ul>{items}</ul>")
        if n == 2 and rng.random() < 0.5:
            parts.append(f"<blockquote>{_paragraph(rng, sentences)}</blockquote>")
    return '<article class="story"><div class="story-body">' + "".join(parts) + "</div></article>"


def _comments(rng: random.Random, sentences: list[str]) -> str:
    items = "".join(
        f'<div class="comment"><span class="author">reader{rng.randrange(999)}</span>'
        f"<p>{_paragraph(rng, sentences)}</p></div>"
        for _ in range(rng.randint(3, 20))
    )
    return f'<section id="comments" class="comments">{items}</section>'


def render(index: int, seed: int = 1) -> Page:
    """Page `index` of the site (the same bytes for the same `index` and `seed`)."""
    rng = random.Random(seed * 1_000_003 + index)
    lang, sentences = corpus()[index % len(corpus())]
    size = min(4.0, max(0.05, rng.lognormvariate(-0.3, 0.8)))  # ~0.75 median, long tail
    paragraphs = max(3, int(50 * size))
    title = html.escape(rng.choice(sentences)[:70].rstrip(" ,.") + f" ({index})")
    description = html.escape(rng.choice(sentences)[:150])
    caption = f"/captions/{index}.vtt" if index % CAPTION_EVERY == 0 else None
    track = (
        f'<video controls src="/video/{index}.mp4"><track kind="captions" src="{caption}" '
        f'srclang="{lang}" label="{lang}"></video>'
        if caption
        else ""
    )
    head = (
        f'<!DOCTYPE html><html lang="{lang}"><head><meta charset="utf-8"><title>{title} | '
        f'Example Media</title><meta name="description" content="{description}">'
        f'<meta property="og:title" content="{title}"><meta name="viewport" '
        'content="width=device-width">'
        + _style(rng, rng.randint(50, 400))
        + _script(rng, rng.randint(2, int(10 + 40 * size)))
        + "</head>"
    )
    menu = rng.randint(60, 200)
    body = (
        '<body><div id="cookie-banner" class="consent">We use cookies. <button>Accept</button>'
        f'</div><header><div class="logo">Example Media</div><nav>{_links(rng, "s", menu)}</nav>'
        f'</header><div class="breadcrumb"><a href="/">Home</a> › {rng.choice(SECTIONS)}</div>'
        f"<main>{_article(rng, sentences, title, paragraphs)}{track}"
        f'<aside class="related"><h3>Related</h3>{_links(rng, "a", rng.randint(5, 30))}</aside>'
        + (_comments(rng, sentences) if rng.random() < 0.4 else "")
        + f"</main><footer>{_links(rng, 'f', rng.randint(20, 60))}<p>© 2026 Example Media"
        "</p></footer>" + _script(rng, rng.randint(1, 8)) + "</body></html>"
    )
    return Page(index, f"/{lang}/article/{index}.html", (head + body).encode(), lang, caption)


def captions(index: int, seed: int = 1) -> bytes:
    """The WebVTT caption file of page `index` (a few dozen cues)."""
    rng = random.Random(seed * 7_919 + index)
    _, sentences = corpus()[index % len(corpus())]
    cues = ["WEBVTT", ""]
    for n in range(rng.randint(20, 80)):
        start, end = n * 4, n * 4 + 3.5
        cues += [f"00:{start // 60:02d}:{start % 60:06.3f} --> 00:{int(end) // 60:02d}:"]
        cues[-1] += f"{end % 60:06.3f}"
        cues += [rng.choice(sentences)[:80], ""]
    return "\n".join(cues).encode()
