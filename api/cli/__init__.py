"""The `evidence` command: run the processes, migrate, manage keys, quotas and webhooks, enqueue.

`main` is the typer app with the process commands and `enqueue`; `keys` (with `key_admin`, what
its flags read and how keys are shown), `quotas` and `webhooks` are its sub-commands; `common`
what they share. The top layer of `api`: it may import all of it.
"""
