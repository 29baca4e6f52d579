"""The origin site of a cluster test: `python -m tests.cluster.origin --cert C --key K`.

Runs in its own namespace, on every address it has (each address is an origin of its own to
the fetcher's politeness, which keys on scheme, host and port). A page is an article whose
text names its path (every URL distinct content), answered after holding the request
`--hold` seconds (`?hold=S` overrides), as a slow site would. For each origin it counts the
requests being served at once and keeps the maximum: a request counts from when its headers
are read until just before its answer is written, a span inside the fetcher's hold of its
per-origin slot, so the maximum is never more than the slots taken at once.

`GET /_stats` answers those counts as JSON (with the pages served to each client address, so
each worker host's share); `POST /_reset` clears them. `/robots.txt` is a 404
at once (everything allowed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import defaultdict
from typing import Any
from urllib.parse import parse_qs

import uvicorn

from tests.support.pages import article


class Counts:
    def __init__(self) -> None:
        self.now: dict[str, int] = defaultdict(int)
        self.max: dict[str, int] = defaultdict(int)
        self.served: dict[str, int] = defaultdict(int)
        #: Per origin, pages served to each client address (each host has its own).
        self.clients: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def as_json(self) -> dict[str, dict[str, Any]]:
        return {
            origin: {
                "now": self.now[origin],
                "max": self.max[origin],
                "served": served,
                "clients": dict(self.clients[origin]),
            }
            for origin, served in self.served.items()
        }

    def reset(self) -> None:
        self.max.clear()
        self.served.clear()
        self.clients.clear()


def make_app(hold: float) -> Any:
    counts = Counts()

    async def respond(send: Any, status: int, body: bytes, content_type: str) -> None:
        headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/_stats":
            await respond(send, 200, json.dumps(counts.as_json()).encode(), "application/json")
            return
        if path == "/_reset":
            counts.reset()
            await respond(send, 204, b"", "text/plain")
            return
        if path == "/robots.txt":
            await respond(send, 404, b"no robots.txt", "text/plain")
            return
        origin = scope["server"][0]  # the address this connection came in on
        query = parse_qs(scope["query_string"].decode())
        seconds = float(query.get("hold", [hold])[0])
        counts.now[origin] += 1
        counts.max[origin] = max(counts.max[origin], counts.now[origin])
        try:
            await asyncio.sleep(seconds)
        finally:
            counts.now[origin] -= 1
        counts.served[origin] += 1
        counts.clients[origin][scope["client"][0]] += 1
        page = article("Cluster origin", paragraphs=3, marker=path).encode()
        await respond(send, 200, page, "text/html; charset=utf-8")

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--port", type=int, default=443)
    parser.add_argument("--hold", type=float, default=0.5)
    args = parser.parse_args()
    uvicorn.run(
        make_app(args.hold),
        host="0.0.0.0",
        port=args.port,
        ssl_certfile=args.cert,
        ssl_keyfile=args.key,
        log_level="warning",
        access_log=False,
        lifespan="off",
        backlog=4096,
        timeout_keep_alive=30,
    )


if __name__ == "__main__":
    main()
