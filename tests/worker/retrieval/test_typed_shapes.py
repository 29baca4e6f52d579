"""The TypedDicts that type the contract's JSON name exactly the keys its schemas require."""

from __future__ import annotations

from typing import Any

import pytest

from api.services.evidence_payload import RetrievalDoc, RetrievalPayload
from worker import contract
from worker.content.results import EvidenceRef, Provenance, Result, SegmentDict
from worker.store.briefs import BriefContent, BriefDoc, Finding


def _retrieval() -> dict[str, Any]:
    schema = contract.load("evidence_retrieve.output.json")
    retrieval: dict[str, Any] = schema["properties"]["retrieval"]
    return retrieval


def _result() -> dict[str, Any]:
    result: dict[str, Any] = _retrieval()["properties"]["result"]["anyOf"][0]
    return result


def _brief() -> dict[str, Any]:
    brief: dict[str, Any] = contract.load("briefs_get.output.json")["properties"]["brief"]
    return brief


def _content() -> dict[str, Any]:
    content: dict[str, Any] = _brief()["properties"]["content"]
    return content


def _finding() -> dict[str, Any]:
    finding: dict[str, Any] = _content()["properties"]["findings"]["items"]
    return finding


SHAPES = [
    (Result, _result),
    (Provenance, lambda: _result()["properties"]["provenance"]),
    (SegmentDict, lambda: _result()["properties"]["segments"]["items"]),
    (EvidenceRef, lambda: _retrieval()["properties"]["evidence"]["anyOf"][0]),
    (EvidenceRef, lambda: _finding()["properties"]["evidence"]["items"]),
    (RetrievalDoc, _retrieval),
    (RetrievalPayload, lambda: contract.load("evidence_retrieve.output.json")),
    (BriefDoc, _brief),
    (BriefContent, _content),
    (Finding, _finding),
]


@pytest.mark.parametrize(("shape", "schema"), SHAPES, ids=lambda v: getattr(v, "__name__", ""))
def test_keys_are_the_schemas(shape: Any, schema: Any) -> None:
    """Every key required, none missing, none extra (each object is additionalProperties: false)."""
    document = schema()
    assert shape.__required_keys__ == set(document["required"])
    assert shape.__optional_keys__ == frozenset()
    assert set(shape.__annotations__) == set(document["properties"])
