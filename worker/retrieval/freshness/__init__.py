"""Freshness: evidence kept fresh cheaply, inside the retrieval lifecycle.

`revalidation` decides at claim time (reuse within the client's window, revalidate with the
stored validators, or fetch in full) and writes at settle; `conditional` is the HTTP side
(validators a fetch leaves, what a 304 may stand for); `sources` remembers what each request
led to last (`evidence_source`); `metrics` counts how retrievals stayed fresh for the fleet.
May import `worker.retrieval.records` and `pipeline`, and the layers below the lifecycle.
"""
