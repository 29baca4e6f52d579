"""Persistence: one home for each table's queries, and the migrations.

`db` owns engines, sessions and the dialect choice (`dialect`, `insert_for`); `models` the
tables; `retrievals` every query on the retrieval table (create, claim, settle, cancel, sweep,
counts); `evidence` the evidence items and revisions; `keys` the API keys; `chunks`, `images`,
`fulltext`, `read_index`, `reports` and `briefs` the read side; `migrations` the Alembic
history. Nothing else in `api` or `worker` queries the tables. May import the base modules and
`worker.content.results`; never `fetch` or `jobs`.
"""
