"""`evidence enqueue`: the batch client, a standalone HTTP client of the public API.

It reads a file of URLs (`input`), submits and polls over HTTP (`http`, `enqueue`) and reports
(`report`). It imports nothing else of the project, so it could ship on its own.
"""
