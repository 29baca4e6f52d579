"""Request bodies of the watch routes, and what they answer (docs/watches.md).

A watch's `url`, `kind` and `language` are read as a retrieve body's are (`api.schemas`), and its
runs are retrievals of exactly them; its `url` must also be https, the only scheme a run could
fetch (a watch of anything else would fail every run). `interval_seconds` is at least 300.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from api.schemas import LANGUAGE_PATTERN, Kind, Language, Url, UuidText
from worker.watches.schedule import MAX_INTERVAL_SECONDS, MIN_INTERVAL_SECONDS


def _https(value: str) -> str:
    if not value.lower().startswith("https://"):
        raise ValueError("must be an https URL (the only scheme a watch's run may fetch)")
    return value


WatchUrl = Annotated[Url, AfterValidator(_https)]
Interval = Annotated[int, Field(ge=MIN_INTERVAL_SECONDS, le=MAX_INTERVAL_SECONDS)]


class WatchCreateRequest(BaseModel):
    """Body of `POST /research-api/watches`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    workspace_id: UuidText
    url: WatchUrl
    kind: Kind
    language: Language | None = None
    interval_seconds: Interval
    enabled: bool = True

    @field_validator("language", "enabled", mode="before")
    @classmethod
    def _no_explicit_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("may be omitted but not null")
        return value


class WatchUpdateRequest(BaseModel):
    """Body of `PATCH /research-api/watches/{watch_id}`: the fields to change."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: WatchUrl | None = None
    kind: Kind | None = None
    #: null clears it (runs then ask for no language).
    language: Language | None = None
    interval_seconds: Interval | None = None
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
    """The watch routes' schemas, by component name."""
    uuid = {"type": "string", "format": "uuid"}
    instant = {"type": "string", "format": "date-time"}
    url = {
        "type": "string",
        "maxLength": 2048,
        "pattern": "^[hH][tT][tT][pP][sS]://",
        "description": "An https URL, read by the WHATWG URL Standard; each run fetches it.",
    }
    kind = {"type": "string", "enum": ["url_text", "published_captions"]}
    language = {"type": "string", "minLength": 1, "maxLength": 35, "pattern": LANGUAGE_PATTERN}
    interval = {
        "type": "integer",
        "minimum": MIN_INTERVAL_SECONDS,
        "maximum": MAX_INTERVAL_SECONDS,
        "description": "Seconds between runs (at least 5 minutes).",
    }
    watch = _object(
        {
            "id": uuid,
            "workspace_id": uuid,
            "url": {"type": "string"},
            "kind": kind,
            "language": _nullable({"type": "string"}),
            "interval_seconds": interval,
            "enabled": {"type": "boolean"},
            "next_run_at": {
                **instant,
                "description": "The next slot (slots are spread over the interval per watch).",
            },
            "last_run_at": _nullable(instant),
            "missed_runs": {
                "type": "integer",
                "minimum": 0,
                "description": "Slots that passed without a run (the scheduler was down).",
            },
            "last_retrieval_id": _nullable(uuid),
            "failing": {"type": "boolean"},
            "created_at": instant,
            "updated_at": instant,
        }
    )
    ref = {"$ref": "#/components/schemas/Watch"}
    return {
        "WatchCreateRequest": _object(
            {
                "workspace_id": uuid,
                "url": url,
                "kind": kind,
                "language": language,
                "interval_seconds": interval,
                "enabled": {"type": "boolean"},
            },
            ["workspace_id", "url", "kind", "interval_seconds"],
        ),
        "WatchUpdateRequest": _object(
            {
                "url": url,
                "kind": kind,
                "language": _nullable(language),
                "interval_seconds": interval,
                "enabled": {"type": "boolean"},
            },
            [],
        ),
        "Watch": watch,
        "WatchResponse": _object({"watch": ref}),
        "WatchListResponse": _object({"watches": {"type": "array", "items": ref}}),
    }
