"""Assemble the FastAPI application."""

from fastapi import FastAPI

from api import errors
from api.routes import evidence, health, retrievals


def create_app() -> FastAPI:
    """Build the app: routes and the error envelope."""
    app = FastAPI(
        title="Evidence retrieval service",
        version="0.1.0",
        description="Fetch public pages and caption files into immutable evidence revisions.",
    )
    errors.install(app)
    app.include_router(health.router)
    app.include_router(retrievals.router)
    app.include_router(evidence.router)
    return app


app = create_app()
