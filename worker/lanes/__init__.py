"""Fair lanes and quotas in the database: who goes next, and how much each workspace may hold.

`batch_order` is the batch lane's round-robin across workspaces (oldest first within one);
`open_tally` keeps room under each workspace's open-retrievals ceiling without counting rows;
`quota_overrides` holds operators' per-workspace limits (`evidence quotas`). The lanes' other
parts live where their mechanism does: the queues and their order in `worker.jobs.celery_app`,
the threads pool that takes messages in lane order (`worker.jobs.lane_pool`), spare batch
tokens (`worker.jobs.spare_tokens`), a process's ranked gates (`worker.platform.ranked_gate`),
and the write-rate bucket at the door (`api.services.admission`); docs/fairness.md ties them
together. May import `worker.store` and below; never the lifecycle or Celery.
"""
