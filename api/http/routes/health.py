"""Liveness and readiness."""

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from worker.domain import clock
from worker.jobs import outbox
from worker.store import db, retrieval_view
from worker.watches import liveness as watch_liveness

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive: answered in the event loop, so it waits for no busy thread."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz() -> JSONResponse:
    """Ready when the database and the broker are reachable; reports the oldest open work."""
    checks: dict[str, Any] = {"database": False, "broker": outbox.broker_reachable()}
    try:
        with db.session_scope(readonly=True) as session:
            db.ping(session)
            checks["database"] = True
            checks["oldest_age_seconds"] = retrieval_view.oldest_open_age(session, clock.now())
    except Exception:  # noqa: BLE001  (any failure means "not ready", never a 500)
        pass
    # Reported, not required: a stopped watch scheduler is an alert, not a reason to take
    # this API out of service (docs/watches.md).
    last_tick = watch_liveness.last_tick()
    checks["watch_scheduler"] = {
        "last_tick_age_seconds": None
        if last_tick is None
        else round(max(0.0, clock.now().timestamp() - last_tick), 3)
    }
    ready = checks["database"] and checks["broker"]
    headers = None if ready else {"Retry-After": "5"}
    return JSONResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks},
        status_code=200 if ready else 503,
        headers=headers,
    )
