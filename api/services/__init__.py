"""What a request does, whatever door it came through (HTTP routes and MCP tools call these).

`retrievals` records, reads and cancels retrievals; `retrieve_batch` is the batch route (up to
1 000 at once); `admission` the write-rate bucket (Redis) and open ceiling at the door;
`read_admission` the read rate; `waiters` lets a request wait for retrievals to settle without a
thread; `read` answers chunks, images and briefs; `evidence_diff` says what changed between two
revisions (`diff_render` computes it, in the processes of `diff_processes`); `briefs` writes
briefs; `image_fetch` fetches an image's bytes; `evidence_payload`
shapes evidence rows; `webhook_endpoints` manages endpoints; `counters` what the API process
counts; `thread_pools` the bounded thread pools of the async routes. May import `api.serving`,
`api.auth`, the request models, `api.errors` and `worker`; never `api.http`, `api.mcp` or
`api.cli`.
"""
