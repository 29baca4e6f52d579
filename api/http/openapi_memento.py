"""How the Memento routes are documented (docs/memento.md): `api.http.openapi.Operation`'s
fields by route, and what those fields cannot say (a link-format body, a redirect's headers,
the headers of a revision's answer), written into the built document's paths."""

from __future__ import annotations

from typing import Any

BASE = "/research-api/evidence/memento/{workspace_id}"
TIMEMAP = f"{BASE}/timemap/{{url}}"
TIMEGATE = f"{BASE}/timegate/{{url}}"
EVIDENCE = "/research-api/evidence/{evidence_id}"

_TIMEMAP_EXAMPLE = (
    '<https://example.org/lake>; rel="original",\n'
    "<http://127.0.0.1:8000/research-api/evidence/memento/0b7c…/timegate/https://example.org/lake>"
    '; rel="timegate",\n'
    "<http://127.0.0.1:8000/research-api/evidence/memento/0b7c…/timemap/https://example.org/lake>"
    '; rel="self"; type="application/link-format"; from="Mon, 01 Jun 2026 09:00:00 GMT"; '
    'until="Tue, 02 Jun 2026 09:00:00 GMT",\n'
    '<http://127.0.0.1:8000/research-api/evidence/5f0e…?revision=1>; rel="first memento"; '
    'datetime="Mon, 01 Jun 2026 09:00:00 GMT",\n'
    '<http://127.0.0.1:8000/research-api/evidence/5f0e…?revision=2>; rel="last memento"; '
    'datetime="Tue, 02 Jun 2026 09:00:00 GMT"\n'
)


def memento_operations() -> dict[tuple[str, str], dict[str, Any]]:
    """The TimeMap and the TimeGate (both read-admitted: 429 too)."""
    return {
        ("get", TIMEMAP): {
            "operation_id": "getTimeMap",
            "body": None,
            "answers": {200: ("", "The TimeMap, in `application/link-format`.")},
            "errors": (404, 429),
        },
        ("get", TIMEGATE): {
            "operation_id": "getTimeGate",
            "body": None,
            "answers": {302: ("", "To the closest revision (its URI-M).")},
            "errors": (404, 429),
        },
    }


def _header(description: str, required: bool = True) -> dict[str, Any]:
    return {"description": description, "required": required, "schema": {"type": "string"}}


def describe(paths: dict[str, Any]) -> None:
    """Fill in the link-format body, the redirect's headers and a revision's memento headers."""
    link = "RFC 8288: the original URL, its TimeMap and mementos near the chosen one."
    paths[TIMEMAP]["get"]["responses"]["200"]["content"] = {
        "application/link-format": {"schema": {"type": "string"}, "example": _TIMEMAP_EXAMPLE}
    }
    paths[TIMEGATE]["get"]["responses"]["302"]["headers"] = {
        "Location": _header(
            "The chosen revision's URI-M: `/research-api/evidence/{id}?revision=N`."
        ),
        "Vary": _header("`accept-datetime`."),
        "Link": _header(link),
    }
    revision = paths[EVIDENCE]["get"]["responses"]["200"]
    revision["headers"] = {
        "Memento-Datetime": _header(
            "With `revision`: when the revision was first seen (RFC 1123).", required=False
        ),
        "Link": _header(
            "With `revision`: its original URL, TimeGate and TimeMap (RFC 7089).", required=False
        ),
    }
