"""Celery: the delivery engine around the plain functions of the core.

`celery_app` configures Celery (acks late, time limits, the lanes' queues and their order),
`tasks` are thin wrappers, `runner` claims (by id, or the next batch retrieval), fetches,
extracts and settles one retrieval, `sweep` expires, rescues and republishes, `outbox`
publishes recorded retrievals to their lane, `notify` announces settled ones on Redis pub/sub.
May import everything in `worker`.
"""
