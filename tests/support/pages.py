"""Pages the lifecycle tests serve from the loopback HTTPS site."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

PARAGRAPH = (
    "Researchers measured the water quality of forty mountain lakes over three summers, "
    "sampling at dawn and at dusk to capture the daily swing in dissolved oxygen. "
)


def article(title: str, paragraphs: int = 6, lang: str = "en", marker: str = "") -> str:
    """A realistic article page with navigation and footer boilerplate."""
    body = "\n".join(
        f"<p>{marker} Paragraph {n}. {PARAGRAPH * 2}</p>" for n in range(1, paragraphs + 1)
    )
    return f"""<!doctype html>
<html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title>
<meta name="description" content="A study of alpine lakes and their oxygen cycles.">
</head><body>
<nav><a href="/">Home</a> <a href="/about">About</a> <a href="/contact">Contact</a></nav>
<article><h1>{title}</h1>
{body}
</article>
<footer>Copyright 2026 Example Science News. All rights reserved.</footer>
</body></html>"""


def slow(handler: BaseHTTPRequestHandler) -> None:
    """Trickle an article over `?s=N` seconds (holds a worker mid-fetch)."""
    seconds = float(parse_qs(urlsplit(handler.path).query).get("s", ["3"])[0])
    page = article("A slowly served article").encode()
    steps = 20
    handler.send_response(200)
    handler.send_header("Content-Type", "text/html; charset=utf-8")
    handler.send_header("Content-Length", str(len(page)))
    handler.end_headers()
    size = len(page) // steps + 1
    try:
        for i in range(steps):
            handler.wfile.write(page[i * size : (i + 1) * size])
            handler.wfile.flush()
            time.sleep(seconds / steps)
    except OSError:
        pass
