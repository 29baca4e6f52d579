"""Pure scoring for the public benchmarks: tokens, P/R/F1, segment counts, the fixed split.

Token scores follow the web-content-extraction-benchmark (Bevendorff et al., 2023): tokens are
whitespace-separated, case and punctuation kept (its `tokenize_ws`), and a page whose gold text
is empty has recall 1 (and precision 1 too when the extractor also returns nothing). Its paper
ranks by ROUGE-LSum; here the tokens are compared as bags (the token-level precision, recall and
F1 of the article-extraction benchmarks), and per-page F1 is averaged per dataset, as its paper
reports. Segment scores follow trafilatura's own evaluation (tests/eval_common.py): each
"with" snippet found in the output is a true positive, each "without" snippet found a false
positive, counted over the whole set.
"""

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

_WHITESPACE = re.compile(r"\s+")
#: One page in this many is held out (scored once per change, never used for choosing).
HELD_OUT_ONE_IN = 3


@dataclass(frozen=True)
class PRF:
    """Precision, recall and F1 of one page (or a mean over pages)."""

    precision: float
    recall: float
    f1: float


def tokenize_ws(text: str) -> list[str]:
    """Whitespace tokens of `text`, as the web-content-extraction-benchmark splits them."""
    text = text.strip()
    return _WHITESPACE.split(text) if text else []


def f1(precision: float, recall: float) -> float:
    """Harmonic mean of precision and recall (0 when both are 0)."""
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def token_prf(gold: str, predicted: str) -> PRF:
    """Bag-of-tokens precision, recall and F1 of `predicted` against `gold`.

    An empty gold text gives recall 1; if the prediction is empty too, the page is perfect
    (the benchmark's rule for pages without main content). An empty prediction against a
    non-empty gold text scores 0.
    """
    gold_tokens, predicted_tokens = Counter(tokenize_ws(gold)), Counter(tokenize_ws(predicted))
    n_gold, n_predicted = gold_tokens.total(), predicted_tokens.total()
    if n_gold == 0:
        return PRF(1.0, 1.0, 1.0) if n_predicted == 0 else PRF(0.0, 1.0, 0.0)
    if n_predicted == 0:
        return PRF(0.0, 0.0, 0.0)
    overlap = (gold_tokens & predicted_tokens).total()
    precision, recall = overlap / n_predicted, overlap / n_gold
    return PRF(precision, recall, f1(precision, recall))


def mean_prf(scores: Sequence[PRF]) -> PRF:
    """Mean precision, recall and F1 over pages (macro: every page counts once)."""
    if not scores:
        return PRF(0.0, 0.0, 0.0)
    n = len(scores)
    return PRF(
        sum(s.precision for s in scores) / n,
        sum(s.recall for s in scores) / n,
        sum(s.f1 for s in scores) / n,
    )


def normalise_spaces(text: str) -> str:
    """Whitespace runs as one space, ends trimmed (trafilatura's eval `norm`)."""
    return _WHITESPACE.sub(" ", text).strip()


def segment_counts(
    with_: Iterable[str], without: Iterable[str], predicted: str | None
) -> tuple[int, int, int, int]:
    """(tp, fp, fn, tn) of one page: snippets that must and must not be in the output."""
    wanted, unwanted = list(with_), list(without)
    text = normalise_spaces(predicted) if predicted else ""
    tp = sum(1 for s in wanted if text and normalise_spaces(s) in text)
    fp = sum(1 for s in unwanted if text and normalise_spaces(s) in text)
    return tp, fp, len(wanted) - tp, len(unwanted) - fp


def segment_prf(counts: Iterable[tuple[int, int, int, int]]) -> PRF:
    """Precision, recall and F1 of summed segment counts (micro over the set)."""
    tp = fp = fn = 0
    for page_tp, page_fp, page_fn, _ in counts:
        tp, fp, fn = tp + page_tp, fp + page_fp, fn + page_fn
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return PRF(precision, recall, f1(precision, recall))


def split_of(dataset: str, page: str) -> str:
    """'held_out' or 'dev': a fixed assignment by hashing the page's id (one in three held out)."""
    digest = hashlib.sha256(f"{dataset}/{page}".encode()).digest()
    return "held_out" if int.from_bytes(digest[:8], "big") % HELD_OUT_ONE_IN == 0 else "dev"


def sha256_hex(data: bytes) -> str:
    """The hex SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def manifest_problems(expected: Mapping[str, str], actual: Mapping[str, str | None]) -> list[str]:
    """What differs between the manifest's checksums and the files found (path -> sha256).

    A file missing or unreadable is given as None in `actual`. Returns one line per problem:
    missing or unreadable files, checksum mismatches, files the manifest does not list.
    """
    problems = []
    for path, digest in sorted(expected.items()):
        if path not in actual or actual[path] is None:
            problems.append(f"missing or unreadable: {path}")
        elif actual[path] != digest:
            problems.append(f"checksum mismatch: {path}")
    problems.extend(f"not in the manifest: {path}" for path in sorted(set(actual) - set(expected)))
    return problems
