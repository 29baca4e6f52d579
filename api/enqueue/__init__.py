"""`evidence enqueue`: the batch client, a standalone HTTP client of the public API.

It reads a file of URLs (`input`), submits and polls over HTTP (`http`, `client`) and reports
(`report`). It imports nothing else of the project but the URL parser (`worker.domain.urls`), so it
could ship on its own.
"""
