"""Signed webhooks: endpoints, deliveries, attempts, signing, the guarded sender.

`endpoints` holds a workspace's endpoints; `records` the deliveries (an outbox fenced like
retrievals; a settle records its deliveries in its own transaction); `dispatch` chooses
which deliveries may be published now (due, their endpoint with room, workspaces in turn);
`delivery` claims, signs, sends and records one attempt; `signing` is Standard Webhooks; `sender`
posts through the fetch's egress guard; `policy` says which endpoint URLs are accepted and when to
retry; `metrics` counts attempts for the fleet. Publishing and the webhook sweep are the Celery
shell's (`worker.jobs.webhook_outbox`, `webhook_tasks`); the routes are
`api.services.webhook_endpoints`. May import `worker.store`, `worker.fetch` and the base; never the
lifecycle or Celery.
"""
