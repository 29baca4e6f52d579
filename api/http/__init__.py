"""The HTTP API: the FastAPI app (`app`), its routes, dependencies, middleware and `/metrics`.

Routes stay thin: they parse, authenticate through `deps`, and call `api.services`.
May import `api.services`, `api.auth`, `api.errors`, the request models and `worker`.
"""
