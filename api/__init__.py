"""The HTTP API: FastAPI routes, auth, error envelope, and the `evidence` command."""
