"""Turning fetched bytes into the contract's result: clean text, or timed caption segments.

The entry point is `worker.retrieval.pipeline`; `html` extracts page text, `markup` bounds the
parsed tree, `text` cleans untrusted text, `captions` and `tracks` handle WebVTT/SubRip and
`<track>`, `images` and `chunking` feed the read side, `results` builds every `result` object. Pure
functions over bytes: may import only the base (`worker.platform`, `worker.domain`).
"""
