"""Page text judged on public, human-labelled benchmarks (`make bench-quality`).

`prepare` turns pinned snapshots of public repositories into a local cache (var/quality-data,
never committed) checked against `manifest.tsv`; `scoring` holds the metrics and the split;
`run` scores the service beside other extractors. See docs/extraction-quality.md.
"""
