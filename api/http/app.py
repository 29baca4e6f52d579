"""Assemble the FastAPI application."""

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from api import errors
from api.http import metrics, openapi
from api.http.middleware import RequestMetrics
from api.http.routes import briefs, chunks, evidence, health, images, retrievals
from api.services import retrievals as retrieval_service

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
    """Size the thread pool; warm the database pool and the broker connection."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = API_THREADS
    with anyio.move_on_after(WARM_UP_SECONDS):
        await anyio.to_thread.run_sync(retrieval_service.warm_up, abandon_on_cancel=True)
    # What is alive now (modules, the app, the pools) lives as long as the process: move it out
    # of the collector's reach, so a full collection scans only what requests allocate. Measured:
    # scanning the ~120 000 start-up objects holds the GIL ~40 ms (longer on a busy core), and
    # every request of the process waited behind it, 100-230 ms, in the first seconds of load.
    gc.collect()
    gc.freeze()
    yield


DESCRIPTION = """Fetch public pages and caption files into immutable evidence revisions, and
search, cite and brief on them.

Every protected route takes an API key as `Authorization: Bearer <key>`. Every error is the
envelope `{"error": {"code", "message", "field"?, "details"?}}`; branch on `code`. Request and
response bodies are the contract's JSON Schemas (worker/schemas). Bodies are closed (unknown
fields are refused with 400) except those of `chunks/get` and `images/get`, whose contract
schemas allow unknown fields; they are ignored there. A method a path does not serve is 405
with `Allow` and the envelope."""


def create_app() -> FastAPI:
    """Build the app: routes, the error envelope, request metrics and /metrics."""
    # /docs and /redoc load Swagger UI's and ReDoc's files from this app (fastapi-offline ships
    # them), not from a CDN: without internet they were blank pages.
    app = FastAPIOffline(
        title="Evidence retrieval service",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        # Swagger UI would otherwise send the document to an online validator for its badge.
        swagger_ui_parameters={"validatorUrl": None},
    )
    errors.install(app)
    openapi.install(app)
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
