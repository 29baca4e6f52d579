"""How the doors serve: uvicorn bounded in what it takes, request bodies bounded before parsing.

`server` runs uvicorn for `evidence api` and the MCP HTTP server; `body_limit` refuses bodies
over EVIDENCE_MAX_BODY_BYTES, `bounded_bodies` each route's own bounds, with `bounded_json`
reading JSON within them and `header_values` reading numbers in headers strictly;
`cpu_claims` gives each API process a CPU. Shared by `api.http` and `api.mcp`; imports
`api.errors` and `worker` only.
"""
