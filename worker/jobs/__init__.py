"""The Celery shell: how work reaches the lifecycle, and nothing of the lifecycle itself.

`celery_app` configures Celery (acks late, time limits, the lanes' queues and their order);
`tasks` and `webhook_tasks` are thin wrappers; `batch_tokens` runs what one batch message
stands for; `outbox` and `webhook_outbox` publish recorded work after its commit (the latter
installs itself on the webhook records); `sweep` expires, rescues and republishes;
`beat_lock` lets beat run on several hosts with one sending the schedule; `node`,
`supervisor`, `lane_pool`, `spare_tokens`, `redis_transport`, `task_events`, `flower_tasks`
and `celery_logs` run a worker process. The top layer of `worker`: it may import all of it.
"""
