"""Quote verification's cost: one 1 000-character quote against a 200 000-character revision,
and a batch of 100 quotes against it (issue 39's targets: p99 under 20 ms and 200 ms).

The matching code alone (`worker.content.quotes.verify`), in this process: no API, no database.
A revision here is ten times the contract's text bound (20 000 characters), the issue's size.
Its text is made from the words of the repo's fixture pages, in paragraphs, with typographic
quotes, dashes and accents; each single-quote run folds the revision afresh (as one API call
does), the batch folds it once for its 100 quotes (as one call with 100 quotes does); the API
keeps the last 64 revisions folded (`api.services.quotes`), so a second call about a revision
costs what "revision kept folded" shows. Wall-clock and CPU time are printed side by side: on a
machine shared with other work the wall clock includes waiting for a CPU.

Kinds of quote: `exact` (a slice of the text), `normalized` (that slice re-cased and re-spaced),
`fuzzy` (three words changed), `none` (made of the same words, said nowhere), `stitched` (two
halves from far apart). The batch is 20 of each.

Run: python -m bench.quote_verify [--runs 200] [--chars 200000] [--quote-chars 1000]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from worker.content.quotes.verify import Source, verify

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("exact", "normalized", "fuzzy", "none", "stitched")


def vocabulary() -> list[str]:
    """Words of the fixture pages (tags dropped), typographic ones included."""
    words: list[str] = []
    for path in sorted((ROOT / "tests" / "fixtures").glob("*/*.html")):
        try:
            raw = path.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError:
            continue  # the pages in legacy encodings
        words += re.sub(r"<[^>]+>", " ", raw).split()
    return [w for w in words if w.isprintable()] or ["lake"]


def make_text(rng: random.Random, words: list[str], chars: int) -> str:
    """Paragraphs of 40 to 160 words, up to `chars` characters."""
    paragraphs: list[str] = []
    size = 0
    while size < chars:
        paragraph = " ".join(rng.choice(words) for _ in range(rng.randint(40, 160)))
        paragraphs.append(paragraph)
        size += len(paragraph) + 1
    return "\n".join(paragraphs)[:chars]


def _slice(rng: random.Random, text: str, size: int) -> str:
    start = text.index(" ", rng.randrange(0, len(text) - size - 200)) + 1
    return text[start : text.rindex(" ", start, start + size)]


def quote(kind: str, rng: random.Random, text: str, words: list[str], size: int) -> str:
    """One quote of about `size` characters of the given kind."""
    if kind == "stitched":
        first = _slice(rng, text[: len(text) // 2], size // 2)
        return first + " " + _slice(rng, text[len(text) // 2 :], size // 2)
    if kind == "none":
        return " ".join(rng.choice(words) for _ in range(size // 6))[:size]
    passage = _slice(rng, text, size)
    if kind == "normalized":
        return "  " + passage.upper().replace(" ", "  \n")
    if kind == "fuzzy":
        said = passage.split(" ")
        for at in rng.sample(range(1, len(said) - 1), 3):
            said[at] = rng.choice(words)
        return " ".join(said)
    return passage


def timed(run: Callable[[], object], runs: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU milliseconds of each of `runs` calls (on a shared machine the wall
    clock includes waiting for a CPU)."""
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.thread_time()
        run()
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.thread_time() - start_cpu) * 1000)
    return wall, cpu


def row(case: str, match: str, times: tuple[list[float], list[float]], target: str) -> str:
    wall, cpu = times
    return (
        f"{case:30} {match:>10} {statistics.median(wall):8.2f} {percentile(wall, 99):8.2f} "
        f"{statistics.median(cpu):8.2f} {percentile(cpu, 99):8.2f}  {target}"
    )


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="timed calls per figure")
    parser.add_argument("--chars", type=int, default=200_000, help="revision length")
    parser.add_argument("--quote-chars", type=int, default=1_000, help="quote length")
    parser.add_argument("--seed", type=int, default=39)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    words = vocabulary()
    text = make_text(rng, words, args.chars)
    url = "https://example.org/page"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"revision: {len(text):,} characters; quotes of about {args.quote_chars:,}")
    print(f"machine: {os.cpu_count()} CPUs, load average {load}")
    print(f"{'case':30} {'match':>10} {'wall p50':>8} {'p99':>8} {'CPU p50':>8} {'p99':>8}  target")
    for kind in KINDS:
        said = quote(kind, rng, text, words, args.quote_chars)
        kept = Source(text, url, "/r")
        match = verify(kept, said)["match"]
        cold = timed(lambda said=said: verify(Source(text, url, "/r"), said), args.runs)
        print(row(f"one quote, {kind}", match, cold, "p99 < 20 ms"))
        warm = timed(lambda said=said, kept=kept: verify(kept, said), args.runs)
        print(row("  revision kept folded", "", warm, ""))
    batch = [quote(kind, rng, text, words, args.quote_chars) for kind in KINDS for _ in range(20)]

    def run_batch() -> list[str]:
        source = Source(text, url, "/r")
        return [verify(source, q)["match"] for q in batch]

    found = run_batch()
    counts = ", ".join(f"{found.count(k)} {k}" for k in ("exact", "normalized", "fuzzy", "none"))
    times = timed(run_batch, max(10, args.runs // 10))
    print(row("batch of 100 (folded once)", "", times, "p99 < 200 ms"))
    print(f"  the batch: 20 quotes of each kind: {counts}")


if __name__ == "__main__":
    main()
