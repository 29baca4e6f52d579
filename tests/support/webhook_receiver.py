"""Webhook receivers on the loopback HTTPS receiver site, verifying with `standardwebhooks`.

`Inbox` is one receiver path: it records every POST (headers and raw body) and answers as its
`plan` says (a status, a delay, a redirect), so a test can make a receiver fail, hang or
redirect, then recover. Tests verify each recorded request with the reference library.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from standardwebhooks import Webhook

from tests.support.services import wait_for
from tests.support.tls_site import Page, TLSSite, send


@dataclass
class Received:
    """One request as the receiver saw it."""

    headers: dict[str, str]
    body: bytes

    def verify(self, secret: str) -> Any:
        """The JSON payload, if the signature verifies with `secret` (else it raises)."""
        return Webhook(secret).verify(self.body, self.headers)


@dataclass
class Inbox:
    """A receiver path of `site` that records requests and answers as planned."""

    site: TLSSite
    path: str = field(default_factory=lambda: f"/hook/{uuid.uuid4().hex}")
    #: What to answer next: a status, or a callable given the handler (default 204).
    plan: Callable[[BaseHTTPRequestHandler], Page | None] | None = None
    received: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.site.add(self.path, self._handle)

    @property
    def url(self) -> str:
        return self.site.url(self.path)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length", "0"))
        body = handler.rfile.read(length)
        if len(body) < length:
            # The sender was cut mid-request (a cluster test kills its host): nothing was
            # delivered, no answer can reach it, and the sender will try again.
            handler.close_connection = True
            return
        with self._lock:
            self.received.append(Received(dict(handler.headers.items()), body))
        page = self.plan(handler) if self.plan else None
        if page is not None:
            send(handler, page)
        else:
            send(handler, Page(b"", "", 204))

    def answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        """Answer every request with `status` from now on."""
        page = Page(body, "text/plain", status, dict(headers or {}))
        self.plan = lambda _: page

    def hang(self, seconds: float) -> None:
        """Answer nothing for `seconds` (longer than the sender waits), then 204."""

        def slow(_: BaseHTTPRequestHandler) -> Page:
            time.sleep(seconds)
            return Page(b"", "", 204)

        self.plan = slow

    def ok(self) -> None:
        self.plan = None

    def wait_for(self, count: int, timeout: float = 30) -> list[Received]:
        """Wait until at least `count` requests came; return them all."""
        wait_for(lambda: len(self.received) >= count, timeout=timeout)
        return list(self.received)
