"""JSON request bodies bounded before they are parsed into models.

A body of a few megabytes can hold hundreds of thousands of keys: validating those against a
closed model built one error per key (about 10 s of CPU for 440 000). Each body route therefore
has `Bounds` sized to what it can legitimately carry, checked in this order: bytes (before
parsing; `api.serving.bounded_bodies` counts them as they arrive), then one C-speed `json.loads`,
then a walk that stops at the first value past a bound, so that it costs at most
`max_values` steps whatever the body holds. Text the database refuses (U+0000, lone surrogates)
is refused here too, naming the field, instead of failing later as a database error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.domain.safe_text import first_refused

#: Marks a body that `parse` leaves to the framework (not JSON at all: it answers that itself).
NOT_JSON = object()


@dataclass(frozen=True)
class Bounds:
    """What one route's JSON body may hold."""

    #: Bytes of the body; a function for limits that follow a setting.
    max_bytes: int | Callable[[], int]
    #: Values in all (objects, arrays, strings, numbers...), keys not counted.
    max_values: int
    #: Nesting of objects and arrays; the body itself is level 1.
    max_depth: int = 8
    #: Keys of any one object.
    max_keys: int = 64
    #: Characters of any one string (keys too).
    max_string_chars: int = 4096
    #: Top-level keys under which text is not checked for refused characters: their values are
    #: checked one item at a time later (a batch's items), so one bad item stays that item's.
    text_unchecked: frozenset[str] = frozenset()

    def byte_limit(self) -> int:
        return self.max_bytes() if callable(self.max_bytes) else self.max_bytes


class Refused(Exception):
    """A body past a bound: the status to answer (400 or 413), a message, the field if known."""

    def __init__(self, message: str, field: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.field, self.status = message, field, status


def field_name(path: tuple[str | int, ...]) -> str | None:
    """The field a value sits at, named as errors name it: `content.findings[0].statement`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f"{'.' if out else ''}{part}"
    return out or None


def parse(data: bytes, bounds: Bounds) -> Any:
    """The body's JSON value, within `bounds`; `NOT_JSON` when it is not JSON at all.

    Raises `Refused` for a body past a bound.
    """
    if len(data) > bounds.byte_limit():
        raise Refused(f"the request body is larger than {bounds.byte_limit()} bytes", status=413)
    try:
        value = json.loads(data)
    except RecursionError:
        raise Refused(f"the request body nests deeper than {bounds.max_depth} levels") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return NOT_JSON
    except ValueError:  # an integer past Python's 4 300-digit conversion limit
        raise Refused("a number in the request body has too many digits") from None
    check(value, bounds)
    return value


def check(value: Any, bounds: Bounds) -> None:
    """Raise `Refused` at the first place `value` passes `bounds`; otherwise return.

    Iterative, and each container's size is checked before its children are queued, so the
    work is at most `max_values` steps.
    """
    stack: list[tuple[Any, tuple[str | int, ...], bool]] = [(value, (), True)]
    seen = 0
    while stack:
        item, path, text_checked = stack.pop()
        seen += 1
        if seen > bounds.max_values:
            raise Refused(f"the request body holds more than {bounds.max_values} values")
        if isinstance(item, str):
            _check_text(item, path, bounds, text_checked)
            continue
        if not isinstance(item, dict | list):
            continue
        if len(path) >= bounds.max_depth:
            raise Refused(
                f"the request body nests deeper than {bounds.max_depth} levels", field_name(path)
            )
        if isinstance(item, dict) and len(item) > bounds.max_keys:
            raise Refused(f"an object holds more than {bounds.max_keys} keys", field_name(path))
        if len(item) + seen > bounds.max_values:
            raise Refused(f"the request body holds more than {bounds.max_values} values")
        if isinstance(item, list):
            stack.extend((child, (*path, i), text_checked) for i, child in enumerate(item))
            continue
        for key, child in item.items():
            _check_text(key, path, bounds, text_checked)
            checked = text_checked and not (not path and key in bounds.text_unchecked)
            stack.append((child, (*path, key), checked))


def _check_text(text: str, path: tuple[str | int, ...], bounds: Bounds, checked: bool) -> None:
    if len(text) > bounds.max_string_chars:
        raise Refused(
            f"a string is longer than {bounds.max_string_chars} characters", field_name(path)
        )
    if checked and first_refused(text) is not None:
        raise Refused("text must not contain U+0000 or unpaired surrogates", field_name(path))
