"""The MCP server: the contract's tools over stdio or streamable HTTP.

`tools` declares each tool from its contract files and validates calls; `read_tools` adds the
read side; `server` wires them to the SDK and authenticates every call. May import
`api.services`, `api.serving`, the base of `api` and `worker`; never `api.http`.
"""
