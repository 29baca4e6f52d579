"""The core both processes share, in layers (each may import only those below it):

`jobs` (the Celery shell: app, tasks, worker process, pools, outboxes, sweeps); `retrieval` (the
lifecycle: record, claim, run, settle, freshness); `webhooks` and `lanes`; `store` (tables and
plain queries) and `fetch` (the guarded, bounded fetch); `content` (bytes to text or segments);
`platform`, `domain` and `contract` at the base. `make lint` checks the layers and that no
package has a circle (import-linter, pyproject.toml). `worker` never imports `api`.
"""
