"""Extraction quality: token precision/recall/F1, docs/s and CPU per page, on each split.

Compares the service (the vote of trafilatura, readability-lxml and Resiliparse on each line),
the service without the vote, plain trafilatura.extract and readability-lxml alone, on
the dev split (used for tuning) and the held-out split (bench/data/extraction_split.json).

Run: .venv/bin/python -m bench.extraction_quality [--repeat N] [--grid]
Prints a table per split, then one JSON line with every figure.
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

from worker.content import html, vote
from worker.content.html import extract_html
from worker.content.markup import parse_html
from worker.content.text import clean_text

DATA = Path(__file__).resolve().parent / "data" / "extraction"
SPLIT = DATA.parent / "extraction_split.json"
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
    #: Process CPU time per page, in milliseconds (one core).
    cpu_ms_per_page: float = 0.0


def tokens(text: str) -> Counter[str]:
    """Lower-cased word tokens (each CJK character is a token)."""
    return Counter(_WORD.findall(text.lower()))


def f1(p: float, r: float) -> float:
    """Harmonic mean of precision and recall."""
    return 2 * p * r / (p + r) if p + r else 0.0


def load(split: str | None = None) -> list[tuple[str, bytes, str]]:
    """Every (name, html bytes, gold text) triple of the labelled set, or of one split."""
    parts: dict[str, str] = json.loads(SPLIT.read_text(encoding="utf-8"))
    pairs = []
    for page in sorted(DATA.glob("*.html")):
        if split is not None and parts[page.stem] != split:
            continue
        gold = page.with_suffix(".txt").read_text(encoding="utf-8")
        pairs.append((page.stem, page.read_bytes(), gold))
    return pairs


def score(
    name: str, extractor: Extractor, pages: list[tuple[str, bytes, str]], repeat: int
) -> Score:
    """Score one extractor on every page; time `repeat` full passes."""
    outputs = [extractor(body) for _, body, _ in pages]
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(repeat):
        for _, body, _ in pages:
            extractor(body)
    elapsed = max(time.perf_counter() - started, 1e-9)
    cpu_ms = (time.process_time() - cpu_started) * 1000 / max(1, repeat * len(pages))
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
        round(cpu_ms, 2),
    )


def ours(body: bytes) -> str:
    """The service's url_text extractor."""
    return extract_html(body, URL).content.text


def service_before(body: bytes) -> str:
    """The service's url_text extractor without the vote (trafilatura's text alone)."""
    vote_step = html.voted_text
    html.voted_text = lambda text, tree, page: text
    try:
        return ours(body)
    finally:
        html.voted_text = vote_step


def trafilatura_alone(body: bytes) -> str:
    """trafilatura's text as the service asks for it, cleaned (no vote)."""
    tree = parse_html(body.decode("utf-8"))
    if tree is None:
        return ""
    return clean_text(html._trafilatura_text(tree, URL, html.EXTRACT_OPTIONS))


def readability_alone(body: bytes) -> str:
    """readability-lxml's article text on its own."""
    tree = parse_html(body.decode("utf-8"))
    return clean_text(vote.readability_text(tree)) if tree is not None else ""


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
    lines = [
        f"{'extractor':<44} {'P':>7} {'R':>7} {'F1':>7} {'macroF1':>8} {'docs/s':>8} {'CPU ms':>7}"
    ]
    for s in scores:
        lines.append(
            f"{s.name:<44} {s.precision:>7.4f} {s.recall:>7.4f} {s.f1:>7.4f} "
            f"{s.macro_f1:>8.4f} {s.docs_per_second:>8.1f} {s.cpu_ms_per_page:>7.2f}"
        )
    return "\n".join(lines)


EXTRACTORS: dict[str, Extractor] = {
    "service": ours,
    "service_before (no vote)": service_before,
    "trafilatura_alone": trafilatura_alone,
    "plain_trafilatura": plain,
    "readability_alone": readability_alone,
}


def main() -> None:
    """Run the benchmark on both splits and print the tables and a JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="timed passes over each split")
    parser.add_argument("--grid", action="store_true", help="also score trafilatura's options")
    args = parser.parse_args()
    figures: dict[str, object] = {}
    for split in ("dev", "held_out"):
        pages = load(split)
        scores = [score(name, fn, pages, args.repeat) for name, fn in EXTRACTORS.items()]
        print(f"{split}: {len(pages)} labelled pages")
        print(table(scores))
        figures[split] = {"pages": len(pages), **{s.name: s.__dict__ for s in scores}}
        if args.grid and split == "dev":
            print(table(grid(pages)))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
