"""Assemble the FastAPI application."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from api import errors
from api.auth import principal_for
from api.http import metrics, openapi
from api.http.middleware import RequestMetrics
from api.http.routes import (
    briefs,
    chunks,
    evidence,
    health,
    images,
    retrievals,
    watches,
    webhooks,
)
from api.services import image_fetch, waiters
from api.services import retrievals as retrieval_service
from api.serving import cpu_claims
from api.serving.body_limit import BodyLimit
from api.serving.bounded_bodies import BoundedBodies, api_rule
from worker.platform import heap, logs, redis_clients
from worker.platform.settings import get_settings

#: Longest the API waits at start for its warm-up before taking requests anyway.
WARM_UP_SECONDS = 10
#: Worker threads per API process (anyio's default: 40): more only queue for the GIL, and fewer
#: than the database pool, so none waits for a connection. Figures: docs/performance.md.
API_THREADS = 8


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    """Size the thread pool; warm the pools; listen for settle notifications."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = API_THREADS
    with anyio.move_on_after(WARM_UP_SECONDS):
        await anyio.to_thread.run_sync(retrieval_service.warm_up, abandon_on_cancel=True)
    # What is alive now lives as long as the process: freeze it, so that a full collection scans
    # only what requests allocate, not the start-up heap (docs/performance.md, "The API").
    heap.freeze()
    waiters.hub()  # subscribe to settle notifications now, not on the first long-poll
    yield
    image_fetch.close_image_fetcher()
    await waiters.close_hub()
    await redis_clients.close_shared_async()


DESCRIPTION = """Fetch public pages and caption files into immutable evidence revisions, and
search, cite and brief on them.

Every protected route takes an API key as `Authorization: Bearer <key>`. Every error is the
envelope `{"error": {"code", "message", "field"?, "details"?}}`; branch on `code`. Request and
response bodies are the contract's JSON Schemas (worker/contract). Bodies are closed (unknown
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
    # Inside the body limit: each route's own bounds and its key, before FastAPI reads a body.
    app.add_middleware(BoundedBodies, rule=api_rule, authenticate=principal_for)
    # Added first, so it runs inside the request metrics: refused bodies are counted too.
    app.add_middleware(BodyLimit)
    openapi.install(app)
    app.add_middleware(RequestMetrics)
    app.include_router(health.router)
    app.include_router(retrievals.router)
    app.include_router(evidence.router)
    app.include_router(chunks.router)
    app.include_router(images.router)
    app.include_router(briefs.router)
    app.include_router(webhooks.router)
    app.include_router(watches.router)
    app.include_router(metrics.router)
    return app


app = create_app()


def served_app() -> FastAPI:
    """The app as `evidence api` serves it, with this process's logging configured first.

    uvicorn imports the app anew in each worker process (`--workers N`), where the command's
    own logging setup never ran: those processes logged every request in structlog's default
    console format, at INFO whatever EVIDENCE_LOG_LEVEL said, and without the redaction step.
    Each process then claims its CPU (`api.serving.cpu_claims`).
    """

    settings = get_settings()
    logs.configure(settings.log_level, settings.log_json)
    cpu_claims.take()
    return app
