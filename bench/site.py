"""The bench's fixture site: loopback HTTPS (trustme CA) serving pre-rendered pages, keep-alive.

An asyncio (uvloop when installed) HTTP/1.1 server: every response is rendered once at start
(identity and gzip), so serving costs little more than TLS and a socket write. It listens on
127.0.0.1 … 127.0.0.K, one "host" per address, to stand in for a batch spanning K sites.
`--latency-ms` delays every response (robots.txt included) without using CPU: a fixed number
of milliseconds, or `mix`, ordinary web latency: lognormal with median 500 ms, p90 1.8 s, p99
5.1 s, capped at 10 s, drawn once per path (so every contender waits the same for each page).
With `--latency-median-ms`, `--latency-p90-ms` and `--latency-cap-ms` each response is delayed
by its own draw from that lognormal distribution instead (capped). With `--validators` every
page carries a strong ETag and a matching If-None-Match is answered 304 Not Modified.

Run: python -m bench.site --pages N --hosts K --latency-ms M|mix --ready FILE
It writes {"port", "ca", "hosts"} to FILE once listening; GET /__stats answers counters.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import math
import random
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trustme

from bench.pages import ROBOTS_TXT, captions, render

HTML = "text/html; charset=utf-8"


@dataclass
class Response:
    """A response rendered once: header bytes for identity and gzip, and both bodies."""

    plain: bytes
    gzipped: bytes | None
    #: With `--validators`: the body's ETag and the 304 that answers it.
    etag: str | None = None
    not_modified: bytes | None = None


@dataclass
class Stats:
    """What the site served."""

    connections: int = 0
    requests: int = 0
    bytes_out: int = 0
    paths: dict[str, int] = field(default_factory=dict)


def _head(status: str, content_type: str, length: int, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n"
        f"Server: bench-site\r\nVary: Accept-Encoding\r\n{extra}\r\n"
    ).encode()


def build(
    body: bytes, content_type: str, status: str = "200 OK", *, validators: bool = False
) -> Response:
    """Render a response once, with a gzip variant for bodies worth compressing."""
    etag = f'"{hashlib.sha256(body).hexdigest()[:20]}"' if validators else None
    tag = f"ETag: {etag}\r\n" if etag else ""
    plain = _head(status, content_type, len(body), tag) + body
    not_modified = (
        f"HTTP/1.1 304 Not Modified\r\nServer: bench-site\r\n{tag}\r\n".encode() if etag else None
    )
    if len(body) < 1024:
        return Response(plain, None, etag, not_modified)
    packed = gzip.compress(body, 6, mtime=0)
    extra = f"Content-Encoding: gzip\r\n{tag}"
    gzipped = _head(status, content_type, len(packed), extra) + packed
    return Response(plain, gzipped, etag, not_modified)


def routes(pages: int, seed: int, validators: bool = False) -> dict[str, Response]:
    """Every path the site serves."""
    table = {"/robots.txt": build(ROBOTS_TXT, "text/plain")}
    for index in range(pages):
        page = render(index, seed)
        table[page.path] = build(page.body, HTML, validators=validators)
        if page.caption_path:
            vtt = "text/vtt; charset=utf-8"
            table[page.caption_path] = build(captions(index, seed), vtt, validators=validators)
    return table


#: z-score of the 90th percentile of the standard normal distribution.
Z90 = 1.2815515655446004


def lognormal(median: float, p90: float, cap: float, seed: int = 1) -> Callable[[], float]:
    """Draws (seconds) from the lognormal with this median and 90th percentile, capped.

    median 0.5 s and p90 1.8 s give sigma 1.0: p99 5.1 s, mean 0.82 s before the cap.
    """
    rng = random.Random(seed)
    mu, sigma = math.log(median), math.log(p90 / median) / Z90
    return lambda: min(cap, rng.lognormvariate(mu, sigma))


#: The latency mix: lognormal around a median of 500 ms with sigma 1.0 (p90 1.8 s, p99 5.1 s).
MIX_MEDIAN_SECONDS = 0.5
MIX_SIGMA = 1.0
MIX_CAP_SECONDS = 10.0


def mix_delay(path: str, seed: int = 1) -> float:
    """The delay of `path` under the latency mix, in seconds (the same for the same path)."""
    digest = hashlib.blake2b(f"{seed}:{path}".encode(), digest_size=8).digest()
    rng = random.Random(int.from_bytes(digest, "big"))
    return min(MIX_CAP_SECONDS, rng.lognormvariate(math.log(MIX_MEDIAN_SECONDS), MIX_SIGMA))


def parse_latency(value: str) -> float | str:
    """`--latency-ms`: milliseconds as a number, or "mix"."""
    return "mix" if value == "mix" else float(value)


def site_delay(args: argparse.Namespace) -> Callable[[str], float]:
    """Each response's delay in seconds, by path, as the latency options ask."""
    if args.latency_ms == "mix":
        seed = args.seed
        return lambda path: mix_delay(path, seed)
    if args.latency_median_ms:
        draw = lognormal(
            args.latency_median_ms / 1000,
            args.latency_p90_ms / 1000,
            args.latency_cap_ms / 1000,
            args.seed,
        )
        return lambda _path: draw()
    fixed = args.latency_ms / 1000
    return lambda _path: fixed


class Site:
    """The server: routes, latency, counters."""

    def __init__(self, table: dict[str, Response], delay: Callable[[str], float]) -> None:
        self.table, self.stats = table, Stats()
        # The bench's own counters answer at once.
        self.delay = lambda path: 0.0 if path == "/__stats" else delay(path)
        self.missing = build(b"not found", "text/plain", "404 Not Found")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve requests on one connection until the client closes it."""
        self.stats.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                path = parts[1].split("?", 1)[0] if len(parts) > 2 else "/"
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (h.partition(":") for h in lines[1:])
                }
                self.stats.requests += 1
                delay = self.delay(path)
                if delay:
                    await asyncio.sleep(delay)
                data = self.respond(
                    path, headers.get("accept-encoding", ""), headers.get("if-none-match")
                )
                writer.write(data)
                self.stats.bytes_out += len(data)
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, ssl.SSLError):
            return
        finally:
            writer.close()

    def respond(self, path: str, accept_encoding: str, if_none_match: str | None = None) -> bytes:
        """The response bytes for `path` (a 304 when `if_none_match` is its ETag)."""
        if path == "/__stats":
            body = json.dumps(self.stats.__dict__ | {"paths": len(self.stats.paths)}).encode()
            return build(body, "application/json").plain
        self.stats.paths[path] = self.stats.paths.get(path, 0) + 1
        response = self.table.get(path, self.missing)
        if response.not_modified is not None and if_none_match == response.etag:
            return response.not_modified
        if response.gzipped is not None and "gzip" in accept_encoding:
            return response.gzipped
        return response.plain


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def hosts(count: int) -> list[str]:
    """The loopback addresses standing in for `count` sites."""
    return [f"127.0.0.{n}" for n in range(1, count + 1)]


async def serve(args: argparse.Namespace) -> None:
    """Listen on every host address, write the ready file, serve forever."""
    ca = trustme.CA()
    names = hosts(args.hosts)
    cert = ca.issue_cert(*names, "localhost")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(context)
    delay = site_delay(args)
    site = Site(routes(args.pages, args.seed, args.validators), delay)
    port = args.port or _free_port()
    server = await asyncio.start_server(
        site.handle, host=names, port=port, ssl=context, backlog=1024, reuse_address=True
    )
    ca_path = Path(args.ready).with_suffix(".ca.pem")
    ca.cert_pem.write_to_path(str(ca_path))
    ready = {"port": port, "ca": str(ca_path), "hosts": names}
    Path(args.ready).write_text(json.dumps(ready))
    async with server:
        await server.serve_forever()


def main() -> None:
    """Parse options and serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--latency-ms", type=parse_latency, default=0.0, help="ms, or mix")
    parser.add_argument("--latency-median-ms", type=float, default=0.0, help="lognormal latency")
    parser.add_argument("--latency-p90-ms", type=float, default=1800.0)
    parser.add_argument("--latency-cap-ms", type=float, default=10000.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--validators", action="store_true", help="ETags; 304 when they match")
    parser.add_argument("--ready", required=True, help="file to write {port, ca, hosts} to")
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args))
    else:
        uvloop.run(serve(args))


if __name__ == "__main__":
    main()
