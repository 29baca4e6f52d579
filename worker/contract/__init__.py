"""The contract's JSON Schemas: each tool's input, output, annotations and examples.

The files beside this module are the contract's own documents, unchanged, and the schemas of
our own tool `research_verify_quote` (`quotes_verify.*`, issue 39), written in their style.
Both sides read them through this import (the MCP server for discovery and validation, the
HTTP API for its OpenAPI document, the tests for checking every payload), never by a path of
their own.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def text(filename: str) -> str | None:
    """One contract file's text (`evidence_retrieve.output.json`, …), or None if there is none."""
    resource = resources.files(__name__).joinpath(filename)
    return resource.read_text(encoding="utf-8") if resource.is_file() else None


def load(filename: str) -> dict[str, Any]:
    """A fresh copy of one contract file's JSON document; KeyError if there is none."""
    source = text(filename)
    if source is None:
        raise KeyError(filename)
    document: dict[str, Any] = json.loads(source)
    return document
