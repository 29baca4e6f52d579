"""The supervisor of a threads-pool worker: replaces a worker that died, passes stops on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.services import ROOT, wait_for
from worker.jobs.supervisor import (
    MAX_RESTART_DELAY_SECONDS,
    RESTART_DELAY_SECONDS,
    restart_delay,
)

#: A supervised "worker" that writes its pid, then sleeps until stopped.
SCRIPT = """
import os, signal, sys, time
from pathlib import Path
from worker.jobs.supervisor import Supervisor

out = Path(sys.argv[1])

def worker():
    with out.open("a") as handle:
        handle.write(f"{os.getpid()}\\n")
    def stop(*_):
        with out.open("a") as handle:
            handle.write(f"stopped {os.getpid()}\\n")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    while True:
        time.sleep(0.1)

sys.exit(Supervisor(worker).run())
"""


def started(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().split("\n") if line.isdigit()]


def test_restart_delay_backs_off_only_for_workers_that_die_young() -> None:
    assert restart_delay(None, 0.5) == RESTART_DELAY_SECONDS
    assert restart_delay(RESTART_DELAY_SECONDS, 0.5) == 2 * RESTART_DELAY_SECONDS
    assert restart_delay(20.0, 0.5) == MAX_RESTART_DELAY_SECONDS
    assert restart_delay(20.0, 3600) == RESTART_DELAY_SECONDS


def test_killed_worker_is_replaced_and_sigterm_stops_both(tmp_path: Path) -> None:
    """SIGKILL of the worker: a new one starts. SIGTERM of the supervisor: the worker gets it,
    stops, and the supervisor exits 0."""
    out = tmp_path / "pids"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(out)], cwd=ROOT)
    try:
        (first,) = wait_for(lambda: started(out), timeout=30)  # type: ignore[misc]
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: len(started(out)) == 2, timeout=30)
        second = started(out)[1]
        assert second != first and proc.poll() is None
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert f"stopped {second}" in out.read_text()
        assert not Path(f"/proc/{second}").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
