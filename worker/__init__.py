"""The retrieval worker: Celery app, tasks, fetch guard, extraction, persistence."""
