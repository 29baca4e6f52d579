"""The contract's vocabulary, pure: no I/O and no project imports outside this package.

`states` is the retrieval state machine, `reasons` the result reasons and the status each
implies, `urls` the one URL parser (WHATWG, through ada), `languages` language tags,
`safe_text` text the database refuses, `clock` the one clock tests can move.
"""
