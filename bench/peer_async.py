"""The peer: what a user would write instead of the service.

A plain asyncio script: httpx downloads (keep-alive pool, `--concurrency` in flight) and a
process pool (one process per core) extracts. `--extract service` (the default) runs the
service's own page-text extraction (`worker.content.html.main_text`: trafilatura with the
service's options, and readability's vote where trafilatura is unsure), so both do the same
extraction work; `--extract trafilatura` runs trafilatura alone with those options. No
database, no queue, no guard, no robots.txt.

Run: python -m bench.peer_async URLS.txt --ca CA.pem [--concurrency 128] [--processes N]
     [--extract service|trafilatura]
Prints one JSON line: {"pages", "ok", "seconds", "rps"}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import httpx
import lxml.html
import trafilatura

from worker.content.html import EXTRACT_OPTIONS, main_text

#: The service's own trafilatura options (precision, tables, no comments, no fallbacks).
OPTIONS = EXTRACT_OPTIONS


def extract(body: bytes, url: str) -> int:
    """trafilatura alone: the main text's length (the text itself stays in the process)."""
    text = trafilatura.extract(body, url=url, **OPTIONS)
    return len(text or "")


def extract_as_service(body: bytes, url: str) -> int:
    """The service's page-text extraction over the parsed page: the main text's length."""
    tree = lxml.html.fromstring(body)
    return len(main_text(tree, url))


EXTRACTORS = {"service": extract_as_service, "trafilatura": extract}


def _warm(name: str) -> int:
    return EXTRACTORS[name](b"<html><body><p>warm up</p></body></html>", "https://example.org/")


async def run(
    urls: list[str], ca: str, concurrency: int, processes: int, extractor: str = "service"
) -> tuple[int, float]:
    """Download and extract every URL; return (pages with text, seconds)."""
    context = ssl.create_default_context(cafile=ca)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    loop = asyncio.get_running_loop()
    ok = 0
    with ProcessPoolExecutor(max_workers=processes) as pool:
        warm = (loop.run_in_executor(pool, _warm, extractor) for _ in range(processes))
        await asyncio.gather(*warm)
        started = time.perf_counter()
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(verify=context, limits=limits, timeout=30) as client:

            async def get(url: str) -> httpx.Response:
                # A burst of new TLS connections to the one-threaded fixture site is sometimes
                # reset; a user's script would try again, and so does this one (twice).
                for attempt in range(3):
                    try:
                        return await client.get(url)
                    except httpx.TransportError:
                        if attempt == 2:
                            raise
                        await asyncio.sleep(0.1)
                raise AssertionError("unreachable")

            async def one(url: str) -> None:
                nonlocal ok
                async with gate:
                    response = await get(url)
                if response.status_code == 200:
                    chars = await loop.run_in_executor(
                        pool, EXTRACTORS[extractor], response.content, url
                    )
                    ok += chars > 0

            await asyncio.gather(*(one(url) for url in urls))
        return ok, time.perf_counter() - started


def main() -> None:
    """Parse options, run, print the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls")
    parser.add_argument("--ca", required=True)
    # Its best setting: enough requests in flight to overlap multi-second origins (128 is as
    # fast as 32 at 0 ms on 2 cores, and several times faster at the latency mix).
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--extract", choices=sorted(EXTRACTORS), default="service")
    args = parser.parse_args()
    with open(args.urls) as handle:
        urls = [line.strip() for line in handle if line.strip()]
    ok, seconds = asyncio.run(run(urls, args.ca, args.concurrency, args.processes, args.extract))
    out = {"pages": len(urls), "ok": ok, "seconds": seconds, "rps": len(urls) / seconds}
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
