"""Quote verification (`POST /research-api/evidence/quotes/verify`, research_verify_quote).

Each quote is checked against an evidence revision of the request's workspace (the latest by
default) by `worker.content.quotes`: the match, its offsets in the revision's text, the chunks
and cues it spans, a text-fragment link to the live page and a link to the revision.

Every item is looked up before any is checked, so a bad one fails the call before the work: an
evidence id that is unknown or in another workspace is 404 `not_found` (existence never leaks),
a revision the evidence does not have is 400 `invalid_input`, each naming the item's field.
The call costs one token of the workspace's read bucket per QUOTES_PER_TOKEN quotes.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from typing import Any

from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import ApiError, invalid_input
from api.read_schemas import QuoteVerifyRequest
from api.services import read_admission
from worker.content.quotes.verify import ChunkAnchor, Source, verify
from worker.store import chunks as chunk_store
from worker.store import evidence as evidence_store

#: Quotes that cost one read token (100 quotes: 10 tokens). A quote is a search of a revision's
#: text, a few milliseconds at most: more than a poll, much less than a retrieval.
QUOTES_PER_TOKEN = 10


def tokens(count: int) -> int:
    """Read tokens a call with `count` quotes costs."""
    return max(1, -(-count // QUOTES_PER_TOKEN))


def revision_path(evidence_id: uuid.UUID, revision: int) -> str:
    """The API path of one evidence revision (relative to the API's origin)."""
    return f"/research-api/evidence/{evidence_id}?revision={revision}"


def _missing(index: int) -> ApiError:
    return ApiError(
        404, "not_found", "no such evidence in this workspace", f"quotes[{index}].evidence_id"
    )


class _Sources:
    """The last SOURCES_KEPT revisions checked, folded, by (evidence id, revision).

    A revision never changes (nor its chunks), so what was folded for one call serves the next:
    an agent checks several quotes of one source, often in several calls. Who may read it is
    checked on every call, before this is consulted."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[uuid.UUID, int], Source] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[uuid.UUID, int]) -> Source | None:
        with self._lock:
            source = self._kept.get(key)
            if source is not None:
                self._kept.move_to_end(key)
            return source

    def put(self, key: tuple[uuid.UUID, int], source: Source) -> None:
        with self._lock:
            self._kept[key] = source
            while len(self._kept) > SOURCES_KEPT:
                self._kept.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()


#: Revisions kept folded per API process (20 000 characters each at most: a few MB in all).
SOURCES_KEPT = 64
sources = _Sources()


def _source(
    session: Session, workspace: uuid.UUID, evidence_id: uuid.UUID, revision: int | None, index: int
) -> tuple[int, Source]:
    evidence = evidence_store.get_evidence(session, evidence_id)
    if evidence is None or evidence.workspace_id != workspace:
        raise _missing(index)
    number = evidence.latest_revision if revision is None else revision
    kept = sources.get((evidence_id, number))
    if kept is not None:
        return number, kept
    row = evidence_store.get_revision(session, evidence_id, number)
    if row is None:
        raise invalid_input(
            f"the evidence has no revision {revision} (latest: {evidence.latest_revision})",
            f"quotes[{index}].revision",
        )
    anchors = [ChunkAnchor(*a) for a in chunk_store.anchors(session, evidence_id, row.revision)]
    source = Source(
        text=row.text,
        page_url=evidence.url_key if evidence.kind == "url_text" else None,
        revision_url=revision_path(evidence_id, row.revision),
        chunks=anchors,
        segments=row.segments or [],
    )
    sources.put((evidence_id, row.revision), source)
    return row.revision, source


def verify_quotes(
    session: Session, principal: Principal, request: QuoteVerifyRequest
) -> dict[str, Any]:
    """research_verify_quote: each quote's match in its revision, in the order asked."""
    principal.require(None)
    if not principal.can_read(request.workspace):
        raise _missing(0)
    read_admission.admit(request.workspace, None, tokens(len(request.quotes)))
    sources: dict[tuple[uuid.UUID, int | None], tuple[int, Source]] = {}
    keys = []
    for index, item in enumerate(request.quotes):
        key = (uuid.UUID(item.evidence_id), item.revision)
        if key not in sources:
            sources[key] = _source(session, request.workspace, *key, index)
        keys.append(key)
    answers = []
    for item, key in zip(request.quotes, keys, strict=True):
        revision, source = sources[key]
        answer = verify(source, item.quote, request.context_chars)
        answers.append({"evidence_id": item.evidence_id, "revision": revision, **answer})
    return {"result": {"quotes": answers}}
