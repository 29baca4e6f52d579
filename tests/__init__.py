"""The test suites.

`tests/worker/<package>/` and `tests/api/<package>/` mirror the code's packages: each module's
own tests. The suites that cross packages are named for what they exercise: `lifecycle` (the
store and services against a real database), `e2e` (real workers fetching loopback sites),
`read`, `webhooks` and `mcp` (those features end to end), `api` (the served API), `ops` (the
processes, the CLI and the documentation), `faults` (`make test-faults`: outages injected),
`cluster` (`make test-cluster`: worker hosts as network namespaces, as root).
`support/` and `fixtures/` serve them all.
"""
