"""Celery: the delivery engine around the plain functions of the core.

`celery_app` configures Celery (acks late, time limits, queues), `tasks` are thin wrappers,
`runner` claims, fetches, extracts and settles one retrieval, `sweep` expires, rescues and
republishes, `outbox` publishes recorded retrievals. May import everything in `worker`.
"""
