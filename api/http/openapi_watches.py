"""How the watch routes are documented: `api.http.openapi.Operation`'s fields, by route."""

from __future__ import annotations

from typing import Any


def _links() -> dict[str, Any]:
    """A created watch's id, as the routes on one watch take it."""
    watch_id = {"watch_id": "$response.body#/watch/id"}
    return {
        name[0].upper() + name[1:]: {"operationId": name, "parameters": watch_id}
        for name in ("getWatch", "updateWatch", "deleteWatch")
    }


def watch_operations() -> dict[tuple[str, str], dict[str, Any]]:
    """The watch routes (docs/watches.md)."""
    base = "/research-api/watches"
    one = f"{base}/{{watch_id}}"
    watch = ("WatchResponse", "The watch, with its schedule.")
    return {
        ("post", base): {
            "operation_id": "createWatch",
            "body": "WatchCreateRequest",
            "answers": {201: watch},
            "errors": (409, 413),
            "links": _links(),
        },
        ("get", base): {
            "operation_id": "listWatches",
            "body": None,
            "answers": {200: ("WatchListResponse", "The watches, oldest first.")},
        },
        ("get", one): {
            "operation_id": "getWatch",
            "body": None,
            "answers": {200: watch},
            "errors": (404,),
        },
        ("patch", one): {
            "operation_id": "updateWatch",
            "body": "WatchUpdateRequest",
            "answers": {200: watch},
            "errors": (404, 413),
        },
        ("delete", one): {
            "operation_id": "deleteWatch",
            "body": None,
            "answers": {204: ("", "Deleted.")},
            "errors": (404,),
        },
    }
