"""The reuse window a client asks for with `Cache-Control: max-age=N` (RFC 9111 §5.2.1.1).

Only `max-age` means anything to the retrieve routes; other directives are ignored, as a cache
ignores directives it does not know. A `max-age` that is not a non-negative integer, or one
given twice, is a 400 naming the header.
"""

from __future__ import annotations

from collections.abc import Iterable

from api.errors import ApiError, invalid_input
from api.serving.header_values import decimal

FIELD = "Cache-Control"
#: Windows longer than this are this long (an INTEGER column holds it; 68 years is forever).
MAX_AGE_CAP_SECONDS = 2**31 - 1


def _invalid(message: str) -> ApiError:
    return invalid_input(message, field=FIELD)


def parse_max_age(values: Iterable[str] | None) -> int | None:
    """The `max-age` of the Cache-Control header's values, in seconds; None when not given."""
    found: int | None = None
    for value in values or ():
        for directive in value.split(","):
            name, _, argument = directive.strip().partition("=")
            if name.strip().lower() != "max-age":
                continue
            digits = argument.strip()
            if len(digits) >= 2 and digits[0] == digits[-1] == '"':
                digits = digits[1:-1]
            seconds = decimal(digits, MAX_AGE_CAP_SECONDS)
            if seconds is None:
                raise _invalid("Cache-Control max-age must be a number of seconds (0 or more)")
            if found is not None:
                raise _invalid("Cache-Control gives max-age more than once")
            found = seconds
    return found
