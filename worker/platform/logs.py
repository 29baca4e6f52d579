"""Structured logging (structlog): JSON lines carrying retrieval_id / workspace_id context."""

import logging
import sys
import threading
from types import TracebackType
from typing import Any

import structlog
from structlog.types import EventDict

#: Keys whose values never reach a log line.
REDACTED_KEYS = frozenset({"authorization", "api_key", "key", "secret", "password", "text"})


def _redact(_: object, __: str, event_dict: EventDict) -> EventDict:
    for key in REDACTED_KEYS & event_dict.keys():
        event_dict[key] = "[redacted]"
    return event_dict


def configure(level: str = "INFO", json: bool = True) -> None:
    """Configure structlog, and render the standard library's records (Celery's) the same way."""
    renderer = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _redact,
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    # httpx logs every request's full URL at INFO; query strings may carry tokens.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # Warnings (Celery's "running as root" among them) become log records, not raw text.
    logging.captureWarnings(True)
    if json:
        _log_uncaught_exceptions()


def _log_uncaught_exceptions() -> None:
    """Exceptions nobody caught become one JSON record each, not a raw traceback on stderr.

    E.g. beat, stopped by a second signal while the interpreter exits, reports an "Exception
    ignored" through `sys.unraisablehook`.
    """
    logger = logging.getLogger("uncaught")

    def excepthook(
        exc_type: type[BaseException], value: BaseException, tb: TracebackType | None
    ) -> None:
        logger.error("uncaught_exception", exc_info=(exc_type, value, tb))

    def thread_excepthook(args: Any) -> None:
        if args.exc_type is SystemExit:
            return  # as the default hook: a thread's SystemExit is a normal end
        logger.error(
            "uncaught_exception in thread %s",
            getattr(args.thread, "name", "?"),
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )

    def unraisablehook(args: Any) -> None:
        message = args.err_msg or "Exception ignored in"
        logger.warning(
            "%s: %r",
            message,
            args.object,
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
    sys.unraisablehook = unraisablehook
