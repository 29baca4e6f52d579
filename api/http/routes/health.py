"""Liveness and readiness."""

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from worker.domain import clock
from worker.jobs import outbox
from worker.store import db, retrieval_view

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is alive."""
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
    ready = checks["database"] and checks["broker"]
    headers = None if ready else {"Retry-After": "5"}
    return JSONResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks},
        status_code=200 if ready else 503,
        headers=headers,
    )
