"""Examples for the OpenAPI document, from the contract's example files where it has them.

`evidence_retrieve` and `briefs_get` have example calls and outputs in worker/contract; the
chunks, images, quotes and evidence routes have none, so theirs are written here to fit the
contract's schemas (a test validates every example against its schema).
"""

from __future__ import annotations

from typing import Any, cast

from api.mcp.tools import contract_file


def _example(name: str) -> dict[str, Any]:
    return contract_file(f"{name}.json")


def _arguments(name: str) -> dict[str, Any]:
    return cast("dict[str, Any]", _example(f"{name}.example_call")["arguments"])


def examples() -> dict[str, Any]:
    """Request bodies and answers, by name: the contract's example files, else built to fit."""
    retrieval = _example("evidence_retrieve.example_output")
    brief = _example("briefs_get.example_output")
    workspace = _arguments("briefs_get")["workspace_id"]
    brief_id = _arguments("briefs_get")["id"]
    content = brief["brief"]["content"]
    hit = {"report_id": 1, "title": "example", "date": "2099-01-15", "score": 0.42}
    evidence_id = "50000000-0000-4000-8000-000000000001"
    chunk = {
        **hit,
        "text": "example",
        "chunk_id": "ch_6b3f7c1e2d4a4f0a9b8c7d6e5f4a3b2c",
        # Its anchor, beside the contract's fields: the revision's text[0:7] is "example".
        "evidence_id": evidence_id,
        "revision": 1,
        "char_start": 0,
        "char_end": 7,
    }
    image = {
        **hit,
        "url": "https://example.com/figure.png",
        "caption": "example",
        "copyright": None,
        "format": "png",
        "image_id": "im_0c1d2e3f4a5b4c6d8e9f0a1b2c3d4e5f",
    }
    result = retrieval["retrieval"]["result"]
    digest = "0" * 64
    evidence = {
        "evidence": {
            "evidence_id": evidence_id,
            "workspace_id": workspace,
            "kind": "url_text",
            "url": "https://example.com/research-notes",
            "language": "en",
            "revision": 1,
            "latest_revision": 1,
            "content_sha256": digest,
            "text": "example",
            "title": "example",
            "description": None,
            "segments": [],
            "provenance": {
                **result["provenance"],
                "source_url": "https://example.com/research-notes",
                "mime_type": "text/html",
                "content_kind": "document_text",
                "language": "en",
                "language_source": "publisher_declared",
            },
            "created_at": "2099-01-15T09:00:01.000Z",
            "last_confirmed_at": "2099-01-16T09:00:01.000Z",
            "revisions": [
                {
                    "revision": 1,
                    "content_sha256": digest,
                    "created_at": "2099-01-15T09:00:01.000Z",
                    "first_seen_at": "2099-01-15T09:00:01.000Z",
                    "last_confirmed_at": "2099-01-16T09:00:01.000Z",
                }
            ],
        }
    }
    ids = {"workspace_id": workspace, "id": brief_id}
    diff = {
        "diff": {
            "evidence_id": evidence_id,
            "kind": "url_text",
            "from_revision": 1,
            "to_revision": 2,
            "from_sha256": digest,
            "to_sha256": "1" * 64,
            "changed": ["text"],
            "text": {
                "unified": "--- revision 1\n+++ revision 2\n@@ -1 +1 @@\n-example\n+revised",
                "lines_added": 1,
                "lines_removed": 1,
                "approximate": False,
                "truncated": False,
            },
            "cues": None,
            "truncated": False,
        }
    }
    return {
        "retrieve": _arguments("evidence_retrieve"),
        "retrieval": retrieval,
        "evidence": evidence,
        "evidence_diff": diff,
        "chunk_search": {"workspace_id": workspace, "query": "research notes", "limit": 10},
        "chunks": {"result": {"chunks": [chunk]}},
        "chunk_get": {"chunk_id": chunk["chunk_id"]},
        "chunk": {"result": {"chunk": {**chunk, "score": 0.0}}},
        "image_search": {"workspace_id": workspace, "query": "figure", "limit": 10},
        "images": {"result": {"images": [image]}},
        "image_get": {"image_id": image["image_id"], "include_bytes": False},
        "image": {
            "result": {"image": {**image, "score": 0.0}, "bytes_base64": None, "format": "png"}
        },
        "quotes_verify": {
            "workspace_id": workspace,
            "quotes": [{"evidence_id": evidence_id, "quote": "Example"}],
        },
        "quotes": {
            "result": {
                "quotes": [
                    {
                        "evidence_id": evidence_id,
                        "revision": 1,
                        "match": "normalized",
                        "score": 100.0,
                        "start": 0,
                        "end": 7,
                        "text": "example",
                        "occurrences": 1,
                        "chunk_ids": [chunk["chunk_id"]],
                        "cues": [],
                        "context_before": "",
                        "context_after": "",
                        "fragment_url": "https://example.com/research-notes#:~:text=example",
                        "revision_url": f"/research-api/evidence/{evidence_id}?revision=1",
                    }
                ]
            }
        },
        # (request body, answer) of the brief routes.
        "brief_get": (_arguments("briefs_get"), brief),
        "brief_create": ({"workspace_id": workspace, "content": content}, brief),
        "brief_revise": ({**ids, "expected_revision": 1, "content": content}, brief),
        "brief_review": ({**ids, "revision": 1}, brief),
        "brief_archive": (ids, brief),
    }
