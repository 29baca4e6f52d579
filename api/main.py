"""Assemble the FastAPI application."""

from fastapi import FastAPI

from api import errors, metrics
from api.middleware import RequestMetrics
from api.routes import briefs, chunks, evidence, health, images, retrievals


def create_app() -> FastAPI:
    """Build the app: routes, the error envelope, request metrics and /metrics."""
    app = FastAPI(
        title="Evidence retrieval service",
        version="0.1.0",
        description="Fetch public pages and caption files into immutable evidence revisions.",
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
