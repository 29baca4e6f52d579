"""The HTTP API: the FastAPI app (`app`), its routes, dependencies, middleware and `/metrics`.

Routes stay thin: they parse, authenticate through `deps`, and call `api.services`.
May import `api.mcp` (the tools the OpenAPI document describes), `api.services`,
`api.serving`, the base of `api` and `worker`.
"""
