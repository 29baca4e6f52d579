"""Assemble the FastAPI application."""

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI

from api import errors
from api.http import metrics
from api.http.middleware import RequestMetrics
from api.http.routes import briefs, chunks, evidence, health, images, retrievals
from api.services import retrievals as retrieval_service
from api.services import waiters

#: Longest the API waits at start for its warm-up before taking requests anyway.
WARM_UP_SECONDS = 10
#: Worker threads per API process for the sync routes and dependencies (anyio's default: 40).
#: A request holds one only for its database and broker round trips, so a few overlap those
#: waits; more only queue for the GIL, and at 200 POST/s the convoys were the latency tail.
#: Measured (bench/load.py, 200 POST/s for 60 s, 2 processes): POST p99 238-517 ms with 40
#: threads, 219 with 16, 77 with 8, 136 with 4. Fewer than the database pool (10): no request
#: waits for a connection.
API_THREADS = 8


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    """Size the thread pool; warm the pools; listen for settle notifications."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = API_THREADS
    with anyio.move_on_after(WARM_UP_SECONDS):
        await anyio.to_thread.run_sync(retrieval_service.warm_up, abandon_on_cancel=True)
    # What is alive now (modules, the app, the pools) lives as long as the process: move it out
    # of the collector's reach, so a full collection scans only what requests allocate. Measured:
    # scanning the ~120 000 start-up objects holds the GIL ~40 ms (longer on a busy core), and
    # every request of the process waited behind it, 100-230 ms, in the first seconds of load.
    gc.collect()
    gc.freeze()
    waiters.hub()  # subscribe to settle notifications now, not on the first long-poll
    yield
    await waiters.close_hub()


def create_app() -> FastAPI:
    """Build the app: routes, the error envelope, request metrics and /metrics."""
    app = FastAPI(
        title="Evidence retrieval service",
        version="0.1.0",
        description="Fetch public pages and caption files into immutable evidence revisions.",
        lifespan=lifespan,
    )
    errors.install(app)
    app.add_middleware(RequestMetrics)
    app.include_router(health.router)
    app.include_router(retrievals.router)
    app.include_router(evidence.router)
    app.include_router(chunks.router)
    app.include_router(images.router)
    app.include_router(briefs.router)
    app.include_router(metrics.router)
    return app


app = create_app()


def served_app() -> FastAPI:
    """The app as `evidence api` serves it, with this process's logging configured first.

    uvicorn imports the app anew in each worker process (`--workers N`), where the command's
    own logging setup never ran: those processes logged every request in structlog's default
    console format, at INFO whatever EVIDENCE_LOG_LEVEL said, and without the redaction step.
    """
    from worker import logs
    from worker.settings import get_settings

    settings = get_settings()
    logs.configure(settings.log_level, settings.log_json)
    return app
