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
from api.services import read as read_service
from api.services import retrievals as retrieval_service

#: Longest the API waits at start for its warm-up before taking requests anyway.
WARM_UP_SECONDS = 10
#: Worker threads per API process (anyio's default: 40): more only queue for the GIL, and fewer
#: than the database pool, so none waits for a connection. Figures: docs/performance.md.
API_THREADS = 8


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    """Size the thread pool; warm the database pool and the broker connection."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = API_THREADS
    with anyio.move_on_after(WARM_UP_SECONDS):
        await anyio.to_thread.run_sync(retrieval_service.warm_up, abandon_on_cancel=True)
    # What is alive now lives as long as the process: freeze it, so that a full collection scans
    # only what requests allocate, not the start-up heap (docs/performance.md, "The API").
    gc.collect()
    gc.freeze()
    yield
    read_service.close_image_fetcher()


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
