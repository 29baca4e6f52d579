"""Watches: sources kept fresh on a schedule (docs/watches.md).

`schedule` is the pure arithmetic of slots (a stable per-watch offset spreads the runs over the
interval; a late scheduler runs a watch once and counts the slots it skipped); `store` holds the
watch rows and their plain queries. May import the lifecycle (`worker.retrieval`), webhooks,
the store and the base; never Celery (`worker.jobs`) nor the doors.
"""
