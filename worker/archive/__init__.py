"""The archived HTTP exchange behind each revision: WARC 1.1 records written with warcio.

`records` builds one exchange's records (request, response or revisit, metadata),
`warc_files` appends them to this process's rolling WARC file so no kill leaves a half record,
`capture` archives a settle's exchanges in its transaction and indexes them
(`worker.store.archive_index`). Used by the lifecycle
(`worker.retrieval`); may import `worker.store`, `worker.fetch` and the base.
"""
