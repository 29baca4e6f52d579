"""The front door: every way a client reaches the service.

`http` is the FastAPI app, `mcp` the MCP server, `batch` the `evidence enqueue` client, `cli` the
`evidence` command. `services` holds what the HTTP routes and the MCP tools both call; `auth`,
`errors` and the request models (`schemas`, `read_schemas`) are shared by all of them. `api` may
import `worker` (the core); `worker` never imports `api`.
"""
