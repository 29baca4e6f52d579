"""What every process runs on: configuration, logs, Redis clients, fleet counters, CPU and heap.

`settings` reads the `EVIDENCE_*` variables, `logs` sets up structlog, `redis_clients` is the
one place Redis clients are made, `fleet_counts` keeps the fleet's counters in Redis,
`confine` logs and counts a failure kept to its item, `ranked_gate` admits interactive work
before batch work, `cpu_pin`, `cpu_share` and `heap` tune a long-running process. Imports
nothing of the project outside this package.
"""
