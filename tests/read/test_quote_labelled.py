"""The labelled quote set (tests/fixtures/quotes/labelled.json), scored end to end.

Realistic pages and caption files (the repo's fixtures) are served on loopback and retrieved by
the real worker; each labelled quote is then verified through the API against its revision:

* absent and stitched quotes: never a match of any kind (precision 1.0);
* verbatim, re-spaced, re-punctuated, re-cased quotes and quotes across chunk boundaries or
  caption cues: exact or normalized, recall at least 0.98 (verbatim ones exact);
* lightly paraphrased quotes: fuzzy, with a score;
* every match's offsets slice the revision's text back to the quote, up to the folding (for
  fuzzy ones, to the score it states).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rapidfuzz import fuzz

from tests.support.factories import Api
from tests.support.read_client import ReadApi
from tests.support.tls_site import TLSSite
from worker.content.quotes.folding import fold, fold_quote
from worker.content.quotes.matching import FUZZY_THRESHOLD

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LABELLED = json.loads((FIXTURES / "quotes" / "labelled.json").read_text(encoding="utf-8"))
#: Categories whose quotes the text says, up to the folding.
SAID = {"verbatim", "respaced", "repunctuated", "recased", "across_chunks", "across_cues"}
#: Categories whose quotes the text does not support.
UNSUPPORTED = {"absent", "stitched"}
MIN_RECALL = 0.98


def retrieve_sources(read: ReadApi, site: TLSSite, workspace: uuid.UUID) -> dict[str, Any]:
    """Each source served and retrieved: {name: (evidence id, revision text)}."""
    tag = uuid.uuid4().hex
    found = {}
    for name, source in LABELLED["sources"].items():
        body = (FIXTURES / source["file"]).read_bytes()
        url = site.page(f"/labelled/{tag}/{name}", body, content_type=source["content_type"])
        done = read.retrieve(url, workspace, kind=source["kind"])
        evidence_id = done["evidence"]["evidence_id"]
        text = read.api.evidence(evidence_id).json()["evidence"]["text"]
        found[name] = (evidence_id, text)
    return found


def score_table(rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """Matches per category, as the test prints them."""
    table: dict[str, Counter[str]] = {}
    for label, answer in rows:
        table.setdefault(label["category"], Counter())[answer["match"]] += 1
    lines = [f"{'category':14} {'n':>3}  exact normalized fuzzy none"]
    for category, counts in table.items():
        n = sum(counts.values())
        lines.append(
            f"{category:14} {n:3}  {counts['exact']:5} {counts['normalized']:10} "
            f"{counts['fuzzy']:5} {counts['none']:4}"
        )
    return "\n".join(lines)


def test_labelled_quotes(api: Api, site: TLSSite, workspace: uuid.UUID) -> None:
    """The set scores: precision 1.0 on absent and stitched, recall >= 0.98 on what the text
    says, paraphrases fuzzy, and every match slices its revision back to the quote."""
    read = ReadApi(api)
    sources = retrieve_sources(read, site, workspace)
    labels = LABELLED["quotes"]
    items = [{"evidence_id": sources[q["source"]][0], "quote": q["quote"]} for q in labels]
    answers: list[dict[str, Any]] = []
    for start in range(0, len(items), 100):
        payload = {"workspace_id": str(workspace), "quotes": items[start : start + 100]}
        answers += read.ok("evidence/quotes/verify", payload)["result"]["quotes"]
    rows = list(zip(labels, answers, strict=True))
    print("\n" + score_table(rows))

    unsupported = [(q, a) for q, a in rows if q["category"] in UNSUPPORTED]
    matched = [q["quote"] for q, a in unsupported if a["match"] != "none"]
    assert unsupported and not matched, f"unsupported quotes matched: {matched}"

    said = [(q, a) for q, a in rows if q["category"] in SAID]
    found = [a for _, a in said if a["match"] in ("exact", "normalized")]
    assert len(found) / len(said) >= MIN_RECALL, score_table(said)
    assert all(a["match"] == "exact" for q, a in rows if q["category"] == "verbatim")

    paraphrased = [a["match"] for q, a in rows if q["category"] == "paraphrased"]
    assert paraphrased and set(paraphrased) == {"fuzzy"}, paraphrased

    for label, answer in rows:
        if answer["match"] == "none":
            continue
        text = sources[label["source"]][1]
        passage = text[answer["start"] : answer["end"]]
        assert passage == answer["text"], label
        if answer["match"] == "fuzzy":
            similarity = fuzz.ratio(fold_quote(label["quote"]), fold(passage).text)
            assert similarity >= FUZZY_THRESHOLD, (label, answer)
            assert abs(similarity - answer["score"]) < 0.1, (label, answer)
        else:
            assert fold(passage).text == fold_quote(label["quote"]), (label, answer)
        assert len(answer["chunk_ids"]) >= label.get("chunks", 1), (label, answer)
        assert len(answer["cues"]) >= label.get("cues", 0), (label, answer)
