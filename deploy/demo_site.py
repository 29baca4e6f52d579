"""A small local HTTPS site of sample pages and caption files for `make demo`.

Certificates are made at start with trustme. Writes, into the directory given: `ca.pem` (the CA
the fetcher must trust), `urls.csv` (the batch to enqueue) and `site.env` (the settings that let
the service fetch from this site); then serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.tls_site import TLSSite  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
VTT = "text/vtt; charset=utf-8"
SRT = "application/x-subrip; charset=utf-8"

#: path -> (fixture file under tests/fixtures, Content-Type)
ROUTES = {
    "/articles/alpine-lakes": ("pages/article_en_bom.html", "text/html"),
    "/articles/fr": ("pages/article_fr_latin1.html", "text/html; charset=ISO-8859-1"),
    "/articles/ja": ("pages/article_ja_sjis.html", "text/html"),
    "/articles/ru": ("pages/article_ru_cp1251.html", "text/html; charset=windows-1251"),
    "/gallery": ("pages/metadata_only.html", "text/html"),
    "/account/login": ("pages/login.html", "text/html"),
    "/talks/rivers": ("pages/video_tracks.html", "text/html"),
    "/talks/silent": ("pages/video_no_track.html", "text/html"),
    "/captions/styled.vtt": ("captions/styled.vtt", VTT),
    "/captions/styled_fr.vtt": ("captions/styled_fr.vtt", VTT),
    "/captions/story_fr.srt": ("captions/story_fr.srt", SRT),
    "/captions/unparsable.vtt": ("captions/unparsable.vtt", VTT),
}

#: The batch: (path, kind, language). One line is deliberately broken, one is a 404.
BATCH = [
    ("/articles/alpine-lakes", "url_text", ""),
    ("/articles/fr", "url_text", "fr"),
    ("/articles/ja", "url_text", ""),
    ("/articles/ru", "url_text", ""),
    ("/gallery", "url_text", ""),
    ("/account/login", "url_text", ""),
    ("/talks/rivers", "published_captions", "en"),
    ("/talks/silent", "published_captions", ""),
    ("/captions/story_fr.srt", "published_captions", ""),
    ("/captions/unparsable.vtt", "published_captions", ""),
    ("/articles/gone", "url_text", ""),
]


def mount(site: TLSSite) -> None:
    """Serve every sample under its path."""
    for path, (name, content_type) in ROUTES.items():
        site.page(path, (FIXTURES / name).read_bytes(), content_type)
    site.page("/robots.txt", "User-agent: *\nAllow: /\n", "text/plain")


def write_files(site: TLSSite, directory: Path) -> None:
    """Write the CA, the URL list (CSV, with one broken line) and the settings for the service."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = site.write_ca(directory / "ca.pem")
    rows = ["url,kind,language"]
    rows += [f"{site.url(path)},{kind},{language}" for path, kind, language in BATCH]
    rows.insert(4, "ftp://files.example/not-https.txt,url_text,")
    (directory / "urls.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    settings = {
        "EVIDENCE_EGRESS_ALLOW_CIDRS": "127.0.0.1/32",
        "EVIDENCE_CA_BUNDLE": str(ca),
        "EVIDENCE_FETCH_ALLOWED_PORTS": str(site.port),
    }
    lines = [f"{name}={value}" for name, value in settings.items()]
    (directory / "site.env").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(directory: str) -> None:
    """Start the site, write its files, serve until told to stop."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with TLSSite() as site:
        mount(site)
        write_files(site, Path(directory))
        sys.stdout.write(f"demo site at {site.url('/')}\n")
        sys.stdout.flush()
        stop.wait()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "var/demo")
