"""What a long-running process made at startup, kept out of the garbage collector's full passes.

A full collection walks every tracked object, and the imports of FastAPI, SQLAlchemy, pydantic
and Celery make a great many: each pass was a pause that everything in flight waited out.
Nothing made at startup becomes garbage later, so `freeze` moves it to the permanent
generation (what `gc.freeze` is for): full passes then walk only what came after. The API
freezes once its pools are warm (`api.http.app.lifespan`), a threads-pool worker once Celery
is ready (`worker.jobs.node`).
"""

from __future__ import annotations

import gc


def freeze() -> int:
    """Collect what startup left behind, then keep the rest out of every later pass; how many
    objects are frozen now."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
