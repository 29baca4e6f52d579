"""Extraction quality: token precision/recall/F1 and docs/s, ours vs plain trafilatura.

Run: .venv/bin/python -m bench.extraction_quality [--repeat N] [--grid]
Prints a table, then one JSON line with every figure.
"""

import argparse
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trafilatura

from worker.content import html
from worker.content.html import extract_html
from worker.content.markup import parse_html

DATA = Path(__file__).resolve().parent / "data" / "extraction"
URL = "https://bench.example/article"
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]|\w+")

Extractor = Callable[[bytes], str]


@dataclass
class Score:
    """Micro-averaged token scores and throughput of one extractor."""

    name: str
    precision: float
    recall: float
    f1: float
    macro_f1: float
    docs_per_second: float


def tokens(text: str) -> Counter[str]:
    """Lower-cased word tokens (each CJK character is a token)."""
    return Counter(_WORD.findall(text.lower()))


def f1(p: float, r: float) -> float:
    """Harmonic mean of precision and recall."""
    return 2 * p * r / (p + r) if p + r else 0.0


def load() -> list[tuple[str, bytes, str]]:
    """Every (name, html bytes, gold text) pair of the labelled set."""
    pairs = []
    for page in sorted(DATA.glob("*.html")):
        gold = page.with_suffix(".txt").read_text(encoding="utf-8")
        pairs.append((page.stem, page.read_bytes(), gold))
    return pairs


def score(
    name: str, extractor: Extractor, pages: list[tuple[str, bytes, str]], repeat: int
) -> Score:
    """Score one extractor on every page; time `repeat` full passes."""
    outputs = [extractor(body) for _, body, _ in pages]
    started = time.perf_counter()
    for _ in range(repeat):
        for _, body, _ in pages:
            extractor(body)
    elapsed = max(time.perf_counter() - started, 1e-9)
    common = got = want = 0
    per_doc = []
    for output, (_, _, gold) in zip(outputs, pages, strict=True):
        out_tokens, gold_tokens = tokens(output), tokens(gold)
        overlap = sum((out_tokens & gold_tokens).values())
        common, got, want = (
            common + overlap,
            got + sum(out_tokens.values()),
            want + sum(gold_tokens.values()),
        )
        p = overlap / max(1, sum(out_tokens.values()))
        r = overlap / max(1, sum(gold_tokens.values()))
        per_doc.append(f1(p, r))
    precision, recall = common / max(1, got), common / max(1, want)
    return Score(
        name,
        round(precision, 4),
        round(recall, 4),
        round(f1(precision, recall), 4),
        round(sum(per_doc) / len(per_doc), 4),
        round(repeat * len(pages) / elapsed, 1),
    )


def ours(body: bytes) -> str:
    """The service's url_text extractor."""
    return extract_html(body, URL).content.text


def plain(body: bytes) -> str:
    """trafilatura.extract with its defaults."""
    return trafilatura.extract(body.decode("utf-8")) or ""


def grid_extractor(options: dict[str, bool]) -> Extractor:
    """Our pipeline with other trafilatura options (for tuning)."""

    def run(body: bytes) -> str:
        tree = parse_html(body.decode("utf-8"))
        doc = trafilatura.bare_extraction(tree, url=URL, with_metadata=True, **options)
        return doc.text if doc is not None and doc.text else ""

    return run


def grid(pages: list[tuple[str, bytes, str]]) -> list[Score]:
    """Score every combination of the tunable trafilatura options."""
    scores = []
    for precision in (False, True):
        for recall in (False, True):
            for tables in (False, True):
                for comments in (False, True):
                    options = {
                        "favor_precision": precision,
                        "favor_recall": recall,
                        "include_tables": tables,
                        "include_comments": comments,
                    }
                    label = ",".join(k for k, v in options.items() if v) or "defaults"
                    scores.append(score(label, grid_extractor(options), pages, 1))
    return scores


def table(scores: list[Score]) -> str:
    """A fixed-width table of scores."""
    lines = [f"{'extractor':<48} {'P':>7} {'R':>7} {'F1':>7} {'macroF1':>8} {'docs/s':>8}"]
    for s in scores:
        lines.append(
            f"{s.name:<48} {s.precision:>7.4f} {s.recall:>7.4f} {s.f1:>7.4f} "
            f"{s.macro_f1:>8.4f} {s.docs_per_second:>8.1f}"
        )
    return "\n".join(lines)


def main() -> None:
    """Run the benchmark and print the table and a JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="timed passes over the set")
    parser.add_argument("--grid", action="store_true", help="also score every option combination")
    args = parser.parse_args()
    pages = load()
    scores = [
        score("service (worker.content.html)", ours, pages, args.repeat),
        score("plain trafilatura.extract(html)", plain, pages, args.repeat),
    ]
    print(f"{len(pages)} labelled pages; options {html.EXTRACT_OPTIONS}")
    print(table(scores))
    if args.grid:
        print(table(grid(pages)))
    ok = scores[0].precision >= scores[1].precision and scores[0].recall >= scores[1].recall
    print(
        json.dumps(
            {
                "pages": len(pages),
                "service": scores[0].__dict__,
                "plain_trafilatura": scores[1].__dict__,
                "not_worse": ok,
            }
        )
    )


if __name__ == "__main__":
    main()
