"""The core both processes share: the retrieval lifecycle, the fetch, the content, the store.

At the base: `states` (the state machine), `reasons` (result reasons and statuses), `settings`,
`clock`, `logs`, `languages`. Above them: `fetch` (the guarded, bounded fetch), `content`
(bytes to text or segments), `store` (persistence), `jobs` (Celery: tasks, runner, sweep), and
`contract` (the contract's JSON Schemas). `worker` never imports `api`.
"""
