"""The front door: every way a client reaches the service, in layers.

`cli` (the `evidence` command) over `http` (the FastAPI app) over `mcp` (the MCP server) over
`services` (what a request does, whatever door it came through) over `serving` (uvicorn and
bounded bodies) and `enqueue` (the `evidence enqueue` client, a client of the public API
only); `auth`, the request models (`schemas`, `read_schemas`, `webhook_schemas`,
`schema_check`) and `errors` at the base. `api` may import `worker`; `worker` never imports
`api`. `make lint` checks the layers (import-linter, pyproject.toml).
"""
