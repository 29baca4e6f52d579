"""Language tags: normalise what publishers declare and compare primary subtags."""

import re

#: The output schema's language pattern and length bound.
TAG_PATTERN = re.compile(r"[a-zA-Z]{2,8}(?:-[a-zA-Z0-9]{1,8})*")
MAX_TAG_CHARS = 35


def normalise_tag(value: str | None) -> str | None:
    """Return a schema-valid language tag from a declared value (first of a list), else None."""
    if not value:
        return None
    first = re.split(r"[,;\s]", value.strip(), maxsplit=1)[0]
    tag = first.replace("_", "-").strip("-")
    if len(tag) > MAX_TAG_CHARS or not TAG_PATTERN.fullmatch(tag):
        return None
    if tag.lower() in ("und", "mul", "zxx", "xx"):
        return None
    return tag


def primary_subtag(tag: str) -> str:
    """Return the lower-cased primary subtag (`en` for `en-GB`)."""
    return tag.split("-", 1)[0].lower()


def same_language(requested: str, declared: str) -> bool:
    """Whether two tags share their primary subtag, case-insensitively."""
    return primary_subtag(requested) == primary_subtag(declared)


def is_mismatch(requested: str | None, declared: str | None) -> bool:
    """Whether a requested language contradicts a declared one (no declaration: never)."""
    if not requested or not declared:
        return False
    return not same_language(requested, declared)
