"""What a request does, whatever door it came through (HTTP routes and MCP tools call these).

`retrievals` records, reads and cancels retrievals; `read` answers chunks, images and briefs;
`briefs` writes briefs; `image_fetch` fetches an image's bytes; `payloads` shapes rows into the
contract's JSON. May import `api.auth`, `api.errors`, the
request models and `worker`; never `api.http` or `api.mcp`.
"""
