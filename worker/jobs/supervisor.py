"""Keep one worker process running: fork it, pass signals on, replace it if it dies.

A threads-pool worker runs all its retrievals in one process. Prefork's main process replaces a
child that died; this does the same for the whole worker process, so a crash or an OOM kill
costs the retrievals it held (re-run after their lease by the sweep), not the service. Stop
signals (TERM, INT, QUIT) are passed on and end the supervisor once the worker has exited;
other signals are only passed on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import traceback
from collections.abc import Callable
from types import FrameType

import structlog

log = structlog.get_logger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
FORWARDED_SIGNALS = (*STOP_SIGNALS, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
#: Waits before restarting a worker that died: the first, and the most (doubling between).
RESTART_DELAY_SECONDS = 0.2
MAX_RESTART_DELAY_SECONDS = 30.0
#: A worker that ran this long before dying is restarted after the first delay again.
HEALTHY_RUN_SECONDS = 10.0


def restart_delay(previous: float | None, ran_seconds: float) -> float:
    """The wait before a restart: the first delay, doubled each time the worker died young."""
    if previous is None or ran_seconds >= HEALTHY_RUN_SECONDS:
        return RESTART_DELAY_SECONDS
    return min(MAX_RESTART_DELAY_SECONDS, previous * 2)


class Supervisor:
    """Runs `start_worker` in a forked child until asked to stop."""

    def __init__(self, start_worker: Callable[[], int]) -> None:
        self.start_worker = start_worker
        self.child = 0
        self.stopping = False

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum in STOP_SIGNALS:
            self.stopping = True
        if self.child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child, signum)

    def stop_requested(self) -> bool:
        """Whether a stop signal came (a method: a signal handler sets it between any two lines)."""
        return self.stopping

    def _spawn(self) -> int:
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                for sig in FORWARDED_SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                code = self.start_worker()
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else int(done.code is not None)
            except BaseException:  # noqa: BLE001 - a forked child must end in os._exit, whatever it raised
                traceback.print_exc()
            finally:
                os._exit(code)
        return pid

    def run(self) -> int:
        """Supervise until a stop signal; the worker's last exit code."""
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self._on_signal)
        delay: float | None = None
        while True:
            started = time.monotonic()
            self.child = self._spawn()
            if self.stopping:  # a stop signal came while forking
                os.kill(self.child, signal.SIGTERM)
            _, status = os.waitpid(self.child, 0)
            self.child = 0
            code = os.waitstatus_to_exitcode(status)
            if self.stopping or code == 0:
                return max(code, 0)
            ran = time.monotonic() - started
            delay = restart_delay(delay, ran)
            log.error("worker_died", exit_code=code, ran_seconds=round(ran, 1), restart_in=delay)
            give_up = time.monotonic() + delay
            while not self.stopping and time.monotonic() < give_up:
                time.sleep(0.1)
            if self.stop_requested():
                return 0
