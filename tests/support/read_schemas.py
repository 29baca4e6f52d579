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


def validate_get_chunk(payload: dict[str, Any]) -> dict[str, Any]:
    """Assert a research_get_chunk answer (hit, miss or error) matches its output schema."""
    return _check(_validator("get_chunk"), payload)


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
        assert set(chunk) == {"report_id", "title", "date", "score", "text", "chunk_id"}
        _check(_validator("get_chunk", "chunk"), chunk)
    return payload["result"]["chunks"]


def validate_image_search(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Assert `{"result": {"images": [image…]}}`, each image shaped as in get_image."""
    assert set(payload) == {"result"} and set(payload["result"]) == {"images"}, payload
    for image in payload["result"]["images"]:
        _check(_validator("get_image", "image"), image)
    return payload["result"]["images"]
