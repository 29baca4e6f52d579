"""Fetching a URL: a minimal HTTPS fetch with the interface the guarded fetcher keeps.

`Fetcher.fetch(url)` returns a bounded `FetchedResponse` or raises `FetchFailure`.
"""

from __future__ import annotations

import ssl

import httpx

from worker.fetch_types import FetchedResponse, FetchFailure
from worker.reasons import Reason
from worker.settings import Settings

ALLOWED_MIME_TYPES = frozenset(
    {
        "text/html",
        "application/xhtml+xml",
        "text/plain",
        "text/vtt",
        "application/x-subrip",
        "application/srt",
        "text/srt",
    }
)


class Fetcher:
    """One per worker process: keeps a connection pool alive across retrievals."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        context = ssl.create_default_context()
        if settings.ca_bundle:
            context.load_verify_locations(cafile=str(settings.ca_bundle))
        self.client = httpx.Client(
            verify=context,
            timeout=httpx.Timeout(
                settings.fetch_read_timeout_seconds,
                connect=settings.fetch_connect_timeout_seconds,
            ),
            headers={"User-Agent": settings.user_agent},
            follow_redirects=True,
        )

    def fetch(self, url: str) -> FetchedResponse:
        if not url.startswith("https://"):
            raise FetchFailure(Reason.UNSAFE_URL, "only https URLs are fetched")
        try:
            with self.client.stream("GET", url) as response:
                body = bytearray()
                truncated = False
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > self.settings.fetch_max_bytes:
                        truncated = True
                        del body[self.settings.fetch_max_bytes :]
                        break
        except httpx.TimeoutException as exc:
            raise FetchFailure(Reason.TIMEOUT, str(exc)) from exc
        except httpx.HTTPError as exc:
            raise FetchFailure(Reason.EGRESS_UNAVAILABLE, type(exc).__name__) from exc
        if response.status_code >= 400:
            raise FetchFailure(Reason.UNAVAILABLE, f"HTTP {response.status_code}", str(response.url))
        content_type = response.headers.get("content-type", "")
        mime = content_type.split(";")[0].strip().lower() or None
        if mime not in ALLOWED_MIME_TYPES:
            raise FetchFailure(Reason.UNSUPPORTED_MEDIA, str(mime), str(response.url))
        return FetchedResponse(
            url=str(response.url),
            status_code=response.status_code,
            headers={k.lower(): v for k, v in response.headers.items()},
            body=bytes(body),
            truncated=truncated,
            mime_type=mime,
            charset=response.charset_encoding,
        )

    def close(self) -> None:
        self.client.close()
