"""Celery's own lines in the service's log format (JSON lines when EVIDENCE_LOG_JSON=true).

A `setup_logging` receiver tells Celery to install none of its handlers: its records (worker,
beat, "Task ... received/succeeded") then reach the root handler that `worker.platform.logs` set up.
Celery also has no separate task logger then (`after_setup_task_logger` is not sent), so task
loggers propagate to the root handler too. What Celery prints rather than logs (its banners,
the shutdown notices it writes straight to the terminal) and what libraries print to stdout or
stderr are suppressed or logged instead.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from celery import signals
from celery.utils.log import LoggingProxy

from worker.platform import logs
from worker.platform.settings import get_settings

#: The logger Celery's worker would have printed its shutdown notices from.
SHUTDOWN_LOGGER = "celery.apps.worker"
#: Celery's own name for what it catches on stdout/stderr.
REDIRECTED_LOGGER = "celery.redirected"


@signals.setup_logging.connect
def _use_service_logging(**_: Any) -> None:
    settings = get_settings()
    logs.configure(settings.log_level, settings.log_json)
    if settings.log_json:
        log_worker_notices()
        redirect_output()


def _say(msg: str, f: object = None) -> None:  # noqa: ARG001  (Celery's signature)
    logging.getLogger(SHUTDOWN_LOGGER).warning(msg.strip())


def log_worker_notices() -> None:
    """Log the notices the worker's signal handlers print ("Warm shutdown", "Hitting Ctrl+C").

    Celery writes them with `os.write` to the terminal, past any handler, through the module
    global `safe_say`, which it looks up at each call (celery<5.7 is pinned).
    """
    import celery.apps.worker

    celery.apps.worker.safe_say = _say


def redirect_output() -> None:
    """Log what libraries print to stdout/stderr, one record per line, as Celery would have.

    Celery redirects them itself only when it set up logging; e.g. kombu prints "Restoring N
    unacknowledged message(s)" when a worker stops holding a message it has not started.
    The handlers keep the real stderr: they captured it when `worker.platform.logs` configured them.
    """
    proxy = LoggingProxy(logging.getLogger(REDIRECTED_LOGGER), logging.WARNING)
    sys.stdout = proxy
    sys.stderr = proxy
