"""Persistence: the tables, their plain queries, and the migrations.

`db` owns engines, sessions and the dialect choice; `models` and `read_models` the tables;
`retrieval_view` a retrieval's row and payload, and the counts metrics read; `evidence` the
evidence items and revisions; `keys` the API keys; `chunks`, `images`, `fulltext`,
`read_index`, `reports` and `briefs` the read side; `migrations` the Alembic history. The
lifecycle's writes to the retrieval table are `worker.retrieval`'s. May import
`worker.content` and the base (platform, domain); never fetch, lanes, webhooks, the lifecycle
or Celery.
"""
