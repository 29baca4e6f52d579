"""Structured logging (structlog): JSON lines carrying retrieval_id / workspace_id context."""

import logging
import sys

import structlog

#: Keys whose values never reach a log line.
REDACTED_KEYS = frozenset({"authorization", "api_key", "key", "secret", "password", "text"})


def _redact(_: object, __: str, event_dict: dict[str, object]) -> dict[str, object]:
    for key in REDACTED_KEYS & event_dict.keys():
        event_dict[key] = "[redacted]"
    return event_dict


def configure(level: str = "INFO", json: bool = True) -> None:
    """Configure structlog and the standard library's root logger once per process."""
    renderer = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="%(levelname)s %(name)s %(message)s"
    )
