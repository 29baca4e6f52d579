"""The worker imports the content pipeline before its pool forks, never inside a task."""

from __future__ import annotations

import subprocess
import sys

from tests.support.services import ROOT

CHECK = """
import sys
from celery import signals
import worker.jobs.tasks
assert "trafilatura" not in sys.modules, "imported before the worker starts"
signals.worker_init.send(sender=None)
assert "worker.retrieval.pipeline" in sys.modules and "trafilatura" in sys.modules
import urllib3.util  # fully initialised, not a half-imported module
print("ok")
"""


def test_worker_init_imports_the_pipeline() -> None:
    """A task cancelled mid-import once left a child with a broken `urllib3`: import it first."""
    done = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
