"""Persistence: one home for each table's queries, and the migrations.

`db` owns engines, sessions and the dialect choice; `models` the tables; `retrievals` every
query on the retrieval table (claim, settle, cancel, sweep); `evidence` the evidence items and
revisions; `chunks`, `images`, `fulltext`, `read_index`, `reports` and `briefs` the read side;
`migrations` the Alembic history. May import the base modules and `worker.content.results`;
never `fetch` or `jobs`.
"""
