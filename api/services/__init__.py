"""What a request does, whatever door it came through (HTTP routes and MCP tools call these).

`retrievals` records, reads and cancels retrievals; `batch` records up to 1 000 at once;
`quotas` holds each workspace's write rate (Redis) and limits; `waiters` lets a request wait for
retrievals to settle without a thread; `read` answers chunks, images and briefs;
`evidence_diff` says what changed between two evidence revisions; `briefs` writes briefs;
`image_fetch` fetches an image's bytes; `payloads` shapes rows into the contract's JSON. May
import `api.auth`, `api.errors`, the request models and `worker`; never `api.http` or
`api.mcp`.
"""
