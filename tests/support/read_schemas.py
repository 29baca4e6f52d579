"""Validate read-side payloads against get_chunk, get_image and briefs_get in worker/contract/."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jsonschema import Draft7Validator

from api.schema_check import EcmaDraft7Validator
from tests.support.schemas import _format_checker
from worker import contract


@lru_cache
def _schema(name: str) -> dict[str, Any]:
    return contract.load(f"{name}.output.json")


@lru_cache
def _validator(name: str, part: str = "") -> Draft7Validator:
    schema = _schema(name)
    if part == "chunk":
        schema = schema["properties"]["result"]["properties"]["chunk"]["anyOf"][0]
    elif part == "image":
        schema = schema["properties"]["result"]["properties"]["image"]["anyOf"][0]
    Draft7Validator.check_schema(schema)
    # Patterns as JSON Schema defines them (ECMA-262: `$` is the end of the text).
    return EcmaDraft7Validator(schema, format_checker=_format_checker())


def _check(validator: Draft7Validator, instance: Any) -> Any:
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        lines = [f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors]
        raise AssertionError("schema violations:\n" + "\n".join(lines))
    return instance


#: A chunk's fields in the contract, and the anchor it carries beside them (the contract's
#: chunk schema allows extra fields).
CHUNK_FIELDS = {"report_id", "title", "date", "score", "text", "chunk_id"}
ANCHOR_FIELDS = {"evidence_id", "revision", "char_start", "char_end"}


def check_anchor(chunk: dict[str, Any]) -> None:
    """A chunk's anchor is well formed: a uuid, a revision, and a span as long as its text."""
    assert isinstance(chunk["evidence_id"], str) and len(chunk["evidence_id"]) == 36, chunk
    assert isinstance(chunk["revision"], int) and chunk["revision"] >= 1, chunk
    start, end = chunk["char_start"], chunk["char_end"]
    assert isinstance(start, int) and isinstance(end, int), chunk
    assert 0 <= start < end and end - start == len(chunk["text"]), chunk


def validate_get_chunk(payload: dict[str, Any]) -> dict[str, Any]:
    """Assert a research_get_chunk answer (hit, miss or error) matches its output schema; a
    hit carries its anchor."""
    _check(_validator("get_chunk"), payload)
    chunk = payload.get("result", {}).get("chunk")
    if chunk is not None:
        assert set(chunk) == CHUNK_FIELDS | ANCHOR_FIELDS, chunk
        check_anchor(chunk)
    return payload


def validate_get_image(payload: dict[str, Any]) -> dict[str, Any]:
    """Assert a research_get_image answer matches its output schema."""
    return _check(_validator("get_image"), payload)


def validate_brief(payload: dict[str, Any]) -> dict[str, Any]:
    """Assert a `{"brief": …}` answer matches briefs_get.output.json."""
    return _check(_validator("briefs_get"), payload)


def validate_chunk_search(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Assert `{"result": {"chunks": [chunk…]}}`, each chunk shaped as in get_chunk."""
    assert set(payload) == {"result"} and set(payload["result"]) == {"chunks"}, payload
    for chunk in payload["result"]["chunks"]:
        assert set(chunk) == CHUNK_FIELDS | ANCHOR_FIELDS
        _check(_validator("get_chunk", "chunk"), chunk)
        check_anchor(chunk)
    return payload["result"]["chunks"]


def validate_image_search(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Assert `{"result": {"images": [image…]}}`, each image shaped as in get_image."""
    assert set(payload) == {"result"} and set(payload["result"]) == {"images"}, payload
    for image in payload["result"]["images"]:
        _check(_validator("get_image", "image"), image)
    return payload["result"]["images"]


def validate_quotes(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Assert a research_verify_quote answer (result or error) matches quotes_verify.output.json;
    each match's passage is as long as its offsets say."""
    _check(_validator("quotes_verify"), payload)
    answers: list[dict[str, Any]] = payload.get("result", {}).get("quotes", [])
    for answer in answers:
        if answer["match"] == "none":
            assert answer["start"] is None and answer["text"] is None, answer
        else:
            assert answer["end"] - answer["start"] == len(answer["text"]), answer
    return answers
