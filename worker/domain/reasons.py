"""Result statuses and reasons of the contract, and which status each reason implies."""

from enum import StrEnum


class Status(StrEnum):
    """`result.status`: how a settled retrieval went."""

    READY = "ready"
    PARTIAL = "partial"
    BLOCKED = "blocked"
    UNSUPPORTED = "unsupported"
    EMPTY = "empty"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"
    CANCELLED = "cancelled"


class Reason(StrEnum):
    """`result.reason` and `result.warnings` entries."""

    UNSAFE_URL = "unsafe_url"
    UNSUPPORTED_SOURCE = "unsupported_source"
    UNSUPPORTED_MEDIA = "unsupported_media"
    UNSUPPORTED_CONTENT = "unsupported_content"
    ACCESS_DENIED = "access_denied"
    LOGIN_REQUIRED = "login_required"
    NO_TEXT = "no_text"
    METADATA_ONLY = "metadata_only"
    NO_CAPTIONS = "no_captions"
    INVALID_CAPTIONS = "invalid_captions"
    NOT_FOUND = "not_found"
    RATE_LIMITED = "rate_limited"
    RESPONSE_TOO_LARGE = "response_too_large"
    TEXT_LIMITED = "text_limited"
    NODES_LIMITED = "nodes_limited"
    CUES_LIMITED = "cues_limited"
    INVALID_CUES = "invalid_cues"
    LANGUAGE_MISMATCH = "language_mismatch"
    SOURCE_PARTIAL = "source_partial"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    EGRESS_UNAVAILABLE = "egress_unavailable"
    UNAVAILABLE = "unavailable"


#: Reasons that leave usable content behind them (the result is `partial`).
PARTIAL_REASONS = frozenset(
    {
        Reason.TEXT_LIMITED,
        Reason.NODES_LIMITED,
        Reason.CUES_LIMITED,
        Reason.INVALID_CUES,
        Reason.METADATA_ONLY,
        Reason.SOURCE_PARTIAL,
        Reason.LANGUAGE_MISMATCH,
        Reason.RESPONSE_TOO_LARGE,
    }
)

#: The status a reason implies when nothing usable was produced.
FAILURE_STATUS: dict[Reason, Status] = {
    Reason.UNSAFE_URL: Status.BLOCKED,
    Reason.ACCESS_DENIED: Status.BLOCKED,
    Reason.LOGIN_REQUIRED: Status.BLOCKED,
    Reason.UNSUPPORTED_SOURCE: Status.UNSUPPORTED,
    Reason.UNSUPPORTED_MEDIA: Status.UNSUPPORTED,
    Reason.UNSUPPORTED_CONTENT: Status.UNSUPPORTED,
    Reason.INVALID_CAPTIONS: Status.UNSUPPORTED,
    Reason.NO_TEXT: Status.EMPTY,
    Reason.NO_CAPTIONS: Status.EMPTY,
    Reason.RATE_LIMITED: Status.RATE_LIMITED,
    Reason.NOT_FOUND: Status.UNAVAILABLE,
    Reason.TIMEOUT: Status.UNAVAILABLE,
    Reason.EGRESS_UNAVAILABLE: Status.UNAVAILABLE,
    Reason.UNAVAILABLE: Status.UNAVAILABLE,
    Reason.RESPONSE_TOO_LARGE: Status.UNAVAILABLE,
    Reason.CANCELLED: Status.CANCELLED,
}

#: Order in which competing content reasons become the main `reason` (first wins).
PARTIAL_PRIORITY: tuple[Reason, ...] = (
    Reason.RESPONSE_TOO_LARGE,
    Reason.METADATA_ONLY,
    Reason.LANGUAGE_MISMATCH,
    Reason.INVALID_CUES,
    Reason.CUES_LIMITED,
    Reason.NODES_LIMITED,
    Reason.TEXT_LIMITED,
    Reason.SOURCE_PARTIAL,
)
