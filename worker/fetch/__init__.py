"""The bounded, guarded fetch: the attack surface, since users hand it arbitrary URLs.

`guard` is the URL and address policy, `egress` the network backend that dials only checked
addresses, `fetcher` the bounded HTTP client (redirects, size and time bounds), `errors` the
classification of what went wrong, `media` the media types and body sniffing, `politeness` and
`robots` the manners, `types` the shared shapes, `shared` the process's fetcher,
`fleet_metrics` the fleet's fetch counters. May import `worker.content` (decoding) and the
base; never `store`, the lifecycle or Celery.
"""
