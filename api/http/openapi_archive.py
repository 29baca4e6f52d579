"""How the archive's routes are documented (docs/archive.md): `api.http.openapi.Operation`'s
fields by route, and what those fields cannot say (a body in the origin's media type, a WACZ
package, the memento headers), written into the built document's paths."""

from __future__ import annotations

from typing import Any

RAW = "/research-api/evidence/{evidence_id}/raw"
EXPORTS = "/research-api/evidence/exports"


def archive_operations() -> dict[tuple[str, str], dict[str, Any]]:
    """The raw bytes of a revision and the WACZ export (both read-admitted: 429 too)."""
    return {
        ("get", RAW): {
            "operation_id": "getEvidenceRaw",
            "body": None,
            "answers": {200: ("", "The body the origin sent, in its own media type.")},
            "errors": (404, 429),
        },
        ("post", EXPORTS): {
            "operation_id": "exportEvidence",
            "body": "EvidenceExportRequest",
            "answers": {200: ("", "The WACZ package (`application/wacz`, a ZIP).")},
            "errors": (404, 413, 429),
            "body_example": {
                "workspace_id": "0b7c5f3e-3a51-4c2b-9a55-2d1f0c7d9e11",
                "evidence_ids": ["5f0e8a42-9c1d-4e7b-8f3a-6b2c1d0e9f87"],
            },
        },
    }


def _header(description: str) -> dict[str, Any]:
    return {"description": description, "required": True, "schema": {"type": "string"}}


def describe(paths: dict[str, Any]) -> None:
    """Fill in the answers' media types and headers."""
    raw = paths[RAW]["get"]["responses"]["200"]
    raw["content"] = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
    raw["headers"] = {
        "Memento-Datetime": _header("When the revision was first seen (RFC 1123)."),
        "Link": _header("Its original URL, TimeGate and TimeMap (RFC 7089)."),
    }
    package = paths[EXPORTS]["post"]["responses"]["200"]
    package["content"] = {"application/wacz": {"schema": {"type": "string", "format": "binary"}}}
    package["headers"] = {"Content-Disposition": _header("`attachment; filename=…wacz`.")}
