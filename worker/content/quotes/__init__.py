"""Quote verification, pure: does a revision's text say what a quote says, and where.

`folding` folds text for comparison with a map back to the original's code points; `matching`
finds a quote exactly, folded or approximately (rapidfuzz), failing closed; `cues` places caption
cues in a revision's text; `fragments` writes text-fragment links (WICG Text Fragments);
`verify` puts them together into one quote's answer. Part of `worker.content`: may import only
the base (`worker.platform`, `worker.domain`).
"""
