"""Validate payloads against the output schema shipped in worker/contract/."""

from datetime import datetime
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from jsonschema import Draft7Validator, FormatChecker

from api.schema_check import EcmaDraft7Validator
from worker import contract


@lru_cache
def _output_schema() -> dict[str, Any]:
    return contract.load("evidence_retrieve.output.json")


def _format_checker() -> FormatChecker:
    """The default checker plus `uri` and `date-time`, which need optional packages otherwise."""
    checker = FormatChecker()

    @checker.checks("uri", raises=ValueError)
    def _uri(value: object) -> bool:
        if not isinstance(value, str):
            return True
        parts = urlsplit(value)
        return bool(parts.scheme and (parts.netloc or parts.path)) and " " not in value

    @checker.checks("date-time", raises=ValueError)
    def _date_time(value: object) -> bool:
        if not isinstance(value, str):
            return True
        return datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None

    return checker


@lru_cache
def _validator(part: str) -> Draft7Validator:
    schema = _output_schema()
    if part == "result":
        schema = schema["properties"]["retrieval"]["properties"]["result"]
    Draft7Validator.check_schema(schema)
    # Patterns as JSON Schema defines them (ECMA-262: `$` is the end of the text).
    return EcmaDraft7Validator(schema, format_checker=_format_checker())


def _check(part: str, instance: Any) -> None:
    errors = sorted(_validator(part).iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        lines = [f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors]
        raise AssertionError("schema violations:\n" + "\n".join(lines))


def validate_result(result: dict[str, Any]) -> dict[str, Any]:
    """Assert `result` matches the output schema's `result` object; return it."""
    assert result is not None, "a result is required here"
    _check("result", result)
    return result


def validate_retrieval_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Assert a whole `{"retrieval": ...}` document matches the output schema; return it."""
    _check("document", payload)
    return payload
