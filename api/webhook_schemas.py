"""Request bodies of the webhook routes, and what they answer (docs/webhooks.md).

The destination URL is checked here with the fetch guard's static rules, reading it as a browser
does (WHATWG URL Standard, IDNA): public HTTPS on an allowed port, no userinfo, no private or
loopback address in any spelling (fullwidth digits, ideographic dots, hex), a public host name
(not `localhost`, `.local`, `.internal`, …), at most 2 048 characters. Bad input is a 400 naming
`url`; the addresses a name resolves to are checked again at every send.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from api.schemas import UuidText
from worker.platform.settings import get_settings
from worker.webhooks import policy

#: Longest endpoint URL, in characters.
MAX_WEBHOOK_URL_CHARS = 2048
MAX_DESCRIPTION_CHARS = 500
#: `retrieval.settled`; the watch events (docs/watches.md).
EventType = Literal["retrieval.settled", "evidence.changed", "watch.failing", "watch.recovered"]
EVENT_NAMES = ["retrieval.settled", "evidence.changed", "watch.failing", "watch.recovered"]
EVENTS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {"type": "string", "enum": EVENT_NAMES},
    "minItems": 1,
    "maxItems": 8,
    "uniqueItems": True,
}


def _public_https(value: str) -> str:
    settings = get_settings()
    refusal = policy.endpoint_refusal(
        value, settings.fetch_allowed_ports, settings.egress_allow_cidrs
    )
    if refusal is not None:
        raise ValueError(f"must be a public https URL ({refusal})")
    return value


WebhookUrl = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_WEBHOOK_URL_CHARS),
    AfterValidator(_public_https),
]


def _unique(events: list[str]) -> list[str]:
    if len(set(events)) != len(events):
        raise ValueError("must not repeat an event type")
    return events


Events = Annotated[list[EventType], Field(min_length=1, max_length=8), AfterValidator(_unique)]
Description = Annotated[str, StringConstraints(max_length=MAX_DESCRIPTION_CHARS)]


class WebhookCreateRequest(BaseModel):
    """Body of `POST /research-api/webhooks`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    workspace_id: UuidText
    url: WebhookUrl
    events: Events
    description: Description | None = None


class WebhookUpdateRequest(BaseModel):
    """Body of `PATCH /research-api/webhooks/{webhook_id}`: the fields to change."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: WebhookUrl | None = None
    events: Events | None = None
    description: Description | None = None
    enabled: bool | None = None


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


def openapi_components() -> dict[str, dict[str, Any]]:
    """The webhook routes' schemas, by component name."""
    uuid = {"type": "string", "format": "uuid"}
    instant = {"type": "string", "format": "date-time"}
    url = {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_WEBHOOK_URL_CHARS,
        "pattern": "^https://",
        "description": (
            "A public https URL on an allowed port, read as browsers read URLs (WHATWG URL"
            " Standard, IDNA). Refused: user info; a private, loopback, link-local or metadata"
            " address in any spelling (`https://１２７.０.０.２/`, `https://127。0。0。2/`,"
            " `https://0x7f.1/`); `localhost`, `LOCALHOST.` and other names that are not public"
            " (single labels, `.localhost`, `.local`, `.internal`, `.home.arpa`, `.invalid`,"
            " `.test`, `.example`, `.onion`, `.alt`, `.localdomain`). Every address the host"
            " resolves to is checked again at each send."
        ),
    }
    description = {"type": "string", "maxLength": MAX_DESCRIPTION_CHARS}
    webhook = _object(
        {
            "id": uuid,
            "workspace_id": uuid,
            "url": {"type": "string"},
            "events": EVENTS_SCHEMA,
            "description": _nullable({"type": "string"}),
            "enabled": {"type": "boolean"},
            "disabled_reason": _nullable({"type": "string"}),
            "previous_secret_expires_at": _nullable(instant),
            "created_at": instant,
            "updated_at": instant,
        }
    )
    delivery = _object(
        {
            "id": {**uuid, "description": "Also the `webhook-id` header of every attempt."},
            "webhook_id": uuid,
            "retrieval_id": uuid,
            "event_type": {"type": "string", "enum": EVENT_NAMES},
            "state": {"type": "string", "enum": ["pending", "delivered", "failed"]},
            "attempts": {"type": "integer", "minimum": 0},
            "last_status": _nullable({"type": "integer"}),
            "last_error": _nullable({"type": "string"}),
            "next_attempt_at": _nullable(instant),
            "retry_until": instant,
            "created_at": instant,
            "last_attempt_at": _nullable(instant),
            "delivered_at": _nullable(instant),
        }
    )
    secret = {"type": "string", "pattern": "^whsec_", "description": "Shown only now."}
    return {
        "WebhookCreateRequest": _object(
            {
                "workspace_id": uuid,
                "url": url,
                "events": EVENTS_SCHEMA,
                "description": _nullable(description),
            },
            ["workspace_id", "url", "events"],
        ),
        "WebhookUpdateRequest": _object(
            {
                "url": url,
                "events": EVENTS_SCHEMA,
                "description": _nullable(description),
                "enabled": {"type": "boolean"},
            },
            [],
        ),
        "Webhook": webhook,
        "WebhookResponse": _object({"webhook": {"$ref": "#/components/schemas/Webhook"}}),
        "WebhookSecretResponse": _object(
            {"webhook": {"$ref": "#/components/schemas/Webhook"}, "secret": secret}
        ),
        "WebhookListResponse": _object(
            {"webhooks": {"type": "array", "items": {"$ref": "#/components/schemas/Webhook"}}}
        ),
        "WebhookDelivery": delivery,
        "WebhookDeliveryResponse": _object(
            {"delivery": {"$ref": "#/components/schemas/WebhookDelivery"}}
        ),
        "WebhookDeliveryListResponse": _object(
            {
                "deliveries": {
                    "type": "array",
                    "items": {"$ref": "#/components/schemas/WebhookDelivery"},
                }
            }
        ),
    }
