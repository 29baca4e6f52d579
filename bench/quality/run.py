"""Score the service's page text beside other extractors on the public benchmarks.

Run: .venv/bin/python -m bench.quality.run [--split held_out|dev|all] [--extractors a,b]
(`make bench-quality`: prepares var/quality-data first when it is missing.)

Every extractor reads the same decoded page (UTF-8 text). Token-scored datasets report mean
per-page precision, recall and F1 (bench/quality/scoring.py); trafilatura's own set reports its
snippet counts. "overall" is the mean of the token-scored datasets' F1 (each dataset counts
once, as the benchmark paper ranks); "pages" is the mean over all their pages. CPU is process
time per page (each extractor timed alone around its call, in its own process, one page at a
time), so a shared machine's load moves it less than wall time; the tables' CPU rows come from
the pass that scored (cached outputs keep the CPU of the run that made them), and a last table
times every extractor on the same sample of pages in turn, in one process, for figures taken
under the same load. Extractor outputs other than the service's are cached per library
version in var/quality-data/_outputs.
"""

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from bench.quality.prepare import CACHE, read_manifest
from bench.quality.scoring import PRF, mean_prf, segment_counts, segment_prf, token_prf

URL = "https://example.org/article"
OUTPUTS = CACHE / "_outputs"
SEGMENT_DATASETS = frozenset({"trafilatura"})

Extractor = Callable[[str], str]


def service(html: str) -> str:
    """The service's url_text main text."""
    from worker.content.html import extract_html

    return extract_html(html, URL).content.text or ""


def trafilatura_defaults(html: str) -> str:
    """trafilatura.extract with its defaults."""
    import trafilatura

    return trafilatura.extract(html) or ""


def trafilatura_precision(html: str) -> str:
    """trafilatura.extract with the options the service sets (precision, tables, fast)."""
    import trafilatura

    from worker.content.html import EXTRACT_OPTIONS

    return trafilatura.extract(html, **EXTRACT_OPTIONS) or ""


def readability_lxml(html: str) -> str:
    """readability-lxml's article, as text with its blocks on lines of their own."""
    import lxml.html
    from readability import Document

    summary = Document(html).summary(html_partial=True)
    if not summary.strip():
        return ""
    fragment = lxml.html.fragment_fromstring(summary, create_parent="div")
    for element in fragment.iter(
        "br", "p", "div", "li", "tr", "pre", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6"
    ):
        element.tail = "\n" + (element.tail or "")
    return str(fragment.text_content())


def resiliparse(html: str) -> str:
    """Resiliparse's main-content plain text."""
    from resiliparse.extract.html2text import extract_plain_text

    return str(extract_plain_text(html, main_content=True))


#: `<html lang>` primary subtags -> jusText stoplists (English when the page declares none).
_JUSTEXT_LANGUAGES = {
    "en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian",
    "pt": "Portuguese", "nl": "Dutch", "ru": "Russian", "pl": "Polish", "cs": "Czech",
    "sv": "Swedish", "da": "Danish", "fi": "Finnish", "hu": "Hungarian", "tr": "Turkish",
    "el": "Greek", "uk": "Ukrainian", "no": "Norwegian_Bokmal", "nb": "Norwegian_Bokmal",
}  # fmt: skip


def justext(html: str) -> str:
    """jusText's good paragraphs, with the stoplist of the page's declared language."""
    import re

    import justext as jt

    declared = re.search(r"<html[^>]*\blang=[\"']?([a-zA-Z]{2})", html[:5000])
    language = _JUSTEXT_LANGUAGES.get(declared.group(1).lower() if declared else "en", "English")
    paragraphs = jt.justext(html, jt.get_stoplist(language))
    return "\n".join(p.text for p in paragraphs if not p.is_boilerplate)


EXTRACTORS: dict[str, tuple[Extractor, str]] = {
    # name: (extractor, the library whose version keys its cached outputs; "" = never cached)
    "service": (service, ""),
    "trafilatura": (trafilatura_defaults, "trafilatura"),
    "trafilatura-precision": (trafilatura_precision, "trafilatura"),
    "readability-lxml": (readability_lxml, "readability-lxml"),
    "resiliparse": (resiliparse, "resiliparse"),
    "justext": (justext, "justext"),
}


@dataclass(frozen=True)
class Output:
    """One extractor's text for one page and the process CPU it took."""

    text: str
    cpu_ms: float


def _extract_one(job: tuple[str, str]) -> tuple[str, str, float]:
    """Run one extractor on one prepared page (in a worker process)."""
    name, key = job
    html = (CACHE / f"{key}.html").read_text(encoding="utf-8")
    extractor = EXTRACTORS[name][0]
    started = time.process_time()
    try:
        text = extractor(html)
    except Exception:  # noqa: BLE001 - a crash scores as empty output, as in the benchmarks
        text = ""
    return key, text, (time.process_time() - started) * 1000


def _cache_file(name: str) -> Path | None:
    library = EXTRACTORS[name][1]
    return OUTPUTS / f"{name}-{version(library)}.jsonl" if library else None


def extract_all(name: str, keys: list[str], workers: int) -> dict[str, Output]:
    """`name`'s output for every page in `keys`, from the cache where it has them."""
    cache_file = _cache_file(name)
    outputs: dict[str, Output] = {}
    if cache_file is not None and cache_file.exists():
        for line in cache_file.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            outputs[row["key"]] = Output(row["text"], row["cpu_ms"])
    missing = [k for k in keys if k not in outputs]
    if missing:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            fresh = list(pool.map(_extract_one, [(name, k) for k in missing], chunksize=8))
        for key, text, cpu_ms in fresh:
            outputs[key] = Output(text, cpu_ms)
        if cache_file is not None:
            OUTPUTS.mkdir(parents=True, exist_ok=True)
            with cache_file.open("a", encoding="utf-8") as f:
                for key, text, cpu_ms in fresh:
                    f.write(json.dumps({"key": key, "text": text, "cpu_ms": cpu_ms}) + "\n")
    return {k: outputs[k] for k in keys}


def gold_of(key: str, suffix: str) -> str:
    """The prepared gold text (or snippets JSON) of a page."""
    return (CACHE / f"{key}{suffix}").read_text(encoding="utf-8")


def score_dataset(
    dataset: str, keys: list[str], suffix: str, outputs: dict[str, Output]
) -> tuple[PRF, list[PRF]]:
    """A dataset's score for one extractor, and its per-page scores (token datasets)."""
    if dataset in SEGMENT_DATASETS:
        counts = []
        for key in keys:
            gold = json.loads(gold_of(key, suffix))
            counts.append(segment_counts(gold["with"], gold["without"], outputs[key].text))
        return segment_prf(counts), []
    per_page = [token_prf(gold_of(key, suffix), outputs[key].text) for key in keys]
    return mean_prf(per_page), per_page


def report(split: str, names: list[str], workers: int) -> dict[str, object]:
    """Score every extractor on one split; print the tables; return the figures."""
    rows = read_manifest()
    chosen = {k: v for k, v in rows.items() if split == "all" or v[0] == split}
    datasets = sorted({k.split("/")[0] for k in chosen})
    keys = sorted(chosen)
    outputs = {name: extract_all(name, keys, workers) for name in names}
    figures: dict[str, dict[str, object]] = {}
    for name in names:
        per_dataset: dict[str, PRF] = {}
        pages: list[PRF] = []
        for dataset in datasets:
            ds_keys = [k for k in keys if k.startswith(dataset + "/")]
            per_dataset[dataset], page_scores = score_dataset(
                dataset, ds_keys, chosen[ds_keys[0]][3], outputs[name]
            )
            pages.extend(page_scores)
        token_sets = [per_dataset[d] for d in datasets if d not in SEGMENT_DATASETS]
        cpu = [o.cpu_ms for o in outputs[name].values()]
        figures[name] = {
            "datasets": {d: s.__dict__ for d, s in per_dataset.items()},
            "overall": mean_prf(token_sets).__dict__,
            "pages": mean_prf(pages).__dict__,
            "cpu_ms_mean": statistics.fmean(cpu),
            "cpu_ms_median": statistics.median(cpu),
        }
    counts = {d: sum(1 for k in keys if k.startswith(d + "/")) for d in datasets}
    print(
        f"\n{split}: {len(keys)} pages; F1 per dataset "
        "(token F1, mean per page; trafilatura: snippet F1)"
    )
    print(f"{'dataset':<22}{'pages':>6}" + "".join(f"{n[:13]:>14}" for n in names))
    for dataset in datasets:
        cells = "".join(f"{figures[n]['datasets'][dataset]['f1']:>14.4f}" for n in names)  # type: ignore[index]
        print(f"{dataset:<22}{counts[dataset]:>6}{cells}")
    for label in ("overall", "pages"):
        cells = "".join(f"{figures[n][label]['f1']:>14.4f}" for n in names)  # type: ignore[index]
        print(f"{label:<22}{'':>6}{cells}")
    for label in ("precision", "recall"):
        cells = "".join(f"{figures[n]['overall'][label]:>14.4f}" for n in names)  # type: ignore[index]
        print(f"{'overall ' + label:<28}{cells}")
    for label in ("cpu_ms_mean", "cpu_ms_median"):
        cells = "".join(f"{figures[n][label]:>14.1f}" for n in names)
        print(f"{label.replace('_', ' '):<28}{cells}")
    return {"split": split, "pages": counts, "extractors": figures}


def cpu_side_by_side(names: list[str], keys: list[str], sample: int) -> dict[str, dict[str, float]]:
    """CPU per page of each extractor on the same sample of pages, timed in turn page by page in
    this one process (so a shared machine's load falls on all of them alike)."""
    chosen = keys[:: max(1, len(keys) // sample)][:sample]
    times: dict[str, list[float]] = {name: [] for name in names}
    for key in chosen:
        html = (CACHE / f"{key}.html").read_text(encoding="utf-8")
        for name in names:
            started = time.process_time()
            with contextlib.suppress(Exception):  # timed as run; a crash is scored elsewhere
                EXTRACTORS[name][0](html)
            times[name].append((time.process_time() - started) * 1000)
    base = statistics.fmean(times["trafilatura"]) if "trafilatura" in times else None
    print(f"\nCPU ms per page, side by side on {len(chosen)} pages (process time, one process)")
    print(f"{'extractor':<24}{'mean':>8}{'median':>8}{'p90':>8}{'x trafilatura':>15}")
    figures = {}
    for name, values in times.items():
        mean, median = statistics.fmean(values), statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else mean
        ratio = f"{mean / base:>15.2f}" if base else f"{'':>15}"
        print(f"{name:<24}{mean:>8.1f}{median:>8.1f}{p90:>8.1f}{ratio}")
        figures[name] = {"mean": mean, "median": median, "p90": p90}
    return figures


def main() -> None:
    """Score the chosen extractors on the chosen split."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", default="held_out", choices=("held_out", "dev", "all"))
    parser.add_argument("--extractors", default=",".join(EXTRACTORS))
    parser.add_argument(
        "--workers", type=int, default=2, help="processes (one page at a time each)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--cpu-sample", type=int, default=200, help="pages timed side by side (0: none)"
    )
    args = parser.parse_args()
    names = [n for n in args.extractors.split(",") if n]
    unknown = set(names) - set(EXTRACTORS)
    if unknown:
        raise SystemExit(f"unknown extractors: {', '.join(sorted(unknown))}")
    figures = report(args.split, names, args.workers)
    if args.cpu_sample:
        rows = read_manifest()
        keys = sorted(k for k, v in rows.items() if args.split == "all" or v[0] == args.split)
        figures["cpu_side_by_side"] = cpu_side_by_side(names, keys, args.cpu_sample)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
