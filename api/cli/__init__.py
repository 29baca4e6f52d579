"""The `evidence` command: run the processes, migrate, manage keys, quotas and webhooks, enqueue.

`main` is the typer app and its commands; `key_admin` reads `evidence keys`' durations and
renders keys; `webhooks` is `evidence webhooks`. The top layer of `api`: it may import all of it.
"""
