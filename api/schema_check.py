"""JSON Schema checking with the contract's semantics: ECMA-262 `pattern`, strict formats.

jsonschema checks `pattern` with Python's `re.search`, whose `$` also matches before a final
newline, so `^…$` lets "en\n" through. JSON Schema says patterns are ECMA-262 regular
expressions, where `$` is the end of the text; `regress` implements exactly those.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import regress
from jsonschema import Draft7Validator, FormatChecker, ValidationError, validators
from jsonschema.protocols import Validator
from pydantic import TypeAdapter
from pydantic import ValidationError as ModelValidationError

from api.schemas import Url, UuidText


@cache
def ecma_regex(pattern: str) -> regress.Regex:
    """A compiled ECMA-262 regular expression (the contract's patterns are few and fixed)."""
    return regress.Regex(pattern, "u")


def _pattern(
    validator: Any, pattern: str, instance: Any, _schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and ecma_regex(pattern).find(instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


#: `validators.extend`, which types-jsonschema leaves unannotated: it makes a new validator class
#: (not a subclass of the one extended).
_extend: Callable[[type[Validator], dict[str, Any]], type[Validator]] = validators.extend

#: Draft 7, with `pattern` as ECMA-262 defines it.
EcmaDraft7Validator = _extend(Draft7Validator, {"pattern": _pattern})


def format_checker() -> FormatChecker:
    """Draft 7 formats, with `uri` and `uuid` checked by the same rules as the HTTP API."""
    checker = FormatChecker()
    for fmt, adapter in (("uri", TypeAdapter(Url)), ("uuid", TypeAdapter(UuidText))):

        def check(value: object, adapter: TypeAdapter[str] = adapter) -> bool:
            if isinstance(value, str):
                adapter.validate_python(value)
            return True

        checker.checks(fmt, raises=ModelValidationError)(check)
    return checker


def input_validator(schema: dict[str, Any]) -> Validator:
    """The validator of a tool's input schema."""
    return EcmaDraft7Validator(schema, format_checker=format_checker())
