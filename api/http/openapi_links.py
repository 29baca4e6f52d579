"""The OpenAPI links of the answers that create something: the operations their ids feed
(`api.http.openapi`)."""

from __future__ import annotations

from typing import Any


def retrieval_links() -> dict[str, Any]:
    """A new retrieval's id, as its poll and cancel routes take it."""
    retrieval_id = {"retrieval_id": "$response.body#/retrieval/id"}
    return {
        "GetRetrieval": {"operationId": "getRetrieval", "parameters": retrieval_id},
        "CancelRetrieval": {"operationId": "cancelRetrieval", "parameters": retrieval_id},
    }


def brief_links() -> dict[str, Any]:
    """A brief answer's ids and revision, as the other brief routes take them."""
    ids = {"workspace_id": "$response.body#/brief/workspace_id", "id": "$response.body#/brief/id"}
    revision = "$response.body#/brief/revision"
    return {
        "GetBrief": {"operationId": "getBrief", "requestBody": ids},
        "ReviseBrief": {
            "operationId": "reviseBrief",
            "requestBody": {**ids, "expected_revision": revision},
        },
        "ReviewBrief": {"operationId": "reviewBrief", "requestBody": {**ids, "revision": revision}},
        "ArchiveBrief": {"operationId": "archiveBrief", "requestBody": ids},
    }


def webhook_links() -> dict[str, Any]:
    """A created endpoint's id, as the routes on one endpoint take it."""
    webhook_id = {"webhook_id": "$response.body#/webhook/id"}
    names = ("getWebhook", "updateWebhook", "rotateWebhookSecret", "listWebhookDeliveries")
    links = {
        name[0].upper() + name[1:]: {"operationId": name, "parameters": webhook_id}
        for name in names
    }
    links["DeleteWebhook"] = {"operationId": "deleteWebhook", "parameters": webhook_id}
    return links
