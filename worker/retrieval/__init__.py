"""The retrieval lifecycle: record, claim, run, settle, with failures confined to their item.

`records` creates retrievals (idempotent per mutation_id, within quotas; `single_retrieval` is
the fast path of one); `claims` takes them (by id, or the batch lane's next); `run` fetches,
extracts and settles one claimed retrieval (`pipeline`, split at its fetches by
`split_pipeline` so extraction runs in `extract_pool`'s processes); `transitions` settles,
cancels, expires, rescues and gives back, each a fenced UPDATE; `settles` writes many settles in
one transaction, and `claim_group`/`settle_group` (over `grouped`) do so for a threads-pool
worker's batch lane; `publication` is the outbox's bookkeeping; `notify` announces settled
retrievals; `outcomes` is what a delivery reports; `freshness` reuses and revalidates what a
request led to last. May import `worker.webhooks`, `worker.lanes` and everything below them
(store, fetch, content, platform, domain); never `worker.jobs` (Celery) or `api`.
"""
