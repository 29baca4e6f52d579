"""What changed between two revisions of one evidence item (`GET …/evidence/{id}/diff`).

The same rules as reading a revision: the key needs the research scope, an item in a
workspace it cannot read is answered exactly like an unknown one (404), and so is a revision
the item does not have. `from` may be after `to` (the diff then runs backwards), and equal
revisions are a valid, empty diff.

A diff of two large revisions is tens of milliseconds of pure-Python CPU (1 000 cues; a
20 000-line text up to half a second). On the request threads, 40 at once held all eight of
them and /healthz waited behind them (p50 1.06 s). So the lookup that says whose item it is
takes a request thread briefly; loading the revisions, diffing and rendering the JSON run in
a pool of their own, `EVIDENCE_DIFF_CONCURRENCY` threads per process, and a workspace has at
most `EVIDENCE_DIFF_PER_WORKSPACE` diffs admitted (running or queued) per process: one more is
answered 429 `rate_limited` with Retry-After at once, as is any past `EVIDENCE_DIFF_QUEUE`
admitted in the process. docs/evidence-diff.md, "Bounds on the work", has the figures.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import anyio.to_thread
from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import not_found
from api.services.admission import rate_limited
from api.services.thread_pools import LoopPool
from worker.content.cue_diff import match_cues
from worker.content.diff import diff_text
from worker.content.results import SegmentDict
from worker.platform.settings import get_settings
from worker.store import evidence as evidence_store
from worker.store.db import read_only_session
from worker.store.models import EvidenceRevision

#: The revision's fields a diff compares, as `changed` names them.
COMPARED = ("text", "title", "description", "segments")
#: Retry-After (seconds) of a diff refused over a bound: a diff takes milliseconds to a second.
DIFF_RETRY_AFTER_SECONDS = 1


def _segments(revision: EvidenceRevision) -> list[SegmentDict]:
    return cast("list[SegmentDict]", revision.segments or [])


def diff_payload(
    evidence_id: uuid.UUID, kind: str, old: EvidenceRevision, new: EvidenceRevision
) -> dict[str, Any]:
    """The diff answer: fields that differ, and the text's or the cues' changes by kind."""
    changed = [name for name in COMPARED if getattr(old, name) != getattr(new, name)]
    text = cues = None
    if kind == "published_captions":
        cues = match_cues(_segments(old), _segments(new))
    else:
        labels = (f"revision {old.revision}", f"revision {new.revision}")
        text = diff_text(old.text or "", new.text or "", labels)
    return {
        "diff": {
            "evidence_id": str(evidence_id),
            "kind": kind,
            "from_revision": old.revision,
            "to_revision": new.revision,
            "from_sha256": old.content_sha256,
            "to_sha256": new.content_sha256,
            "changed": changed,
            "text": text,
            "cues": cues,
            "truncated": (text or cues or {"truncated": False})["truncated"],
        }
    }


def _readable(session: Session, principal: Principal, evidence_id: uuid.UUID) -> tuple[str, str]:
    """(workspace, kind) of an item the key can read; 404 as for an unknown one otherwise."""
    evidence = evidence_store.get_evidence(session, evidence_id)
    if evidence is None or not principal.can_read(evidence.workspace_id):
        raise not_found("no such evidence")
    return str(evidence.workspace_id), evidence.kind


def _diff_loaded(
    session: Session, evidence_id: uuid.UUID, kind: str, old: int, new: int
) -> dict[str, Any]:
    before = evidence_store.get_revision(session, evidence_id, old)
    after = before if new == old else evidence_store.get_revision(session, evidence_id, new)
    if before is None or after is None:
        raise not_found(f"no such revision: {old if before is None else new}")
    return diff_payload(evidence_id, kind, before, after)


class Admitted:
    """The diffs admitted in this process, by workspace (touched from the event loop only)."""

    def __init__(self) -> None:
        self.by_workspace: Counter[str] = Counter()

    @contextmanager
    def hold(self, workspace: str, per_workspace: int, total: int) -> Iterator[None]:
        """Admit one diff of `workspace` for the block, or refuse at once (429)."""
        if self.by_workspace[workspace] >= per_workspace:
            raise rate_limited(
                f"this workspace already has {per_workspace} diffs running; retry later",
                DIFF_RETRY_AFTER_SECONDS,
            )
        if self.by_workspace.total() >= total:
            raise rate_limited("too many diffs are running; retry later", DIFF_RETRY_AFTER_SECONDS)
        self.by_workspace[workspace] += 1
        try:
            yield
        finally:
            self.by_workspace[workspace] -= 1
            if not self.by_workspace[workspace]:
                del self.by_workspace[workspace]


admitted = Admitted()
#: The diff pool's bound (its threads, per event loop).
_pool = LoopPool()


def _lookup(principal: Principal, evidence_id: uuid.UUID) -> tuple[str, str]:
    with read_only_session() as session:
        return _readable(session, principal, evidence_id)


def _rendered(evidence_id: uuid.UUID, kind: str, old: int, new: int) -> bytes:
    """The answer as JSON bytes, rendered here so that the event loop never walks it."""
    with read_only_session() as session:
        payload = _diff_loaded(session, evidence_id, kind, old, new)
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


async def diff_json(principal: Principal, evidence_id: uuid.UUID, old: int, new: int) -> bytes:
    """The diff answer as JSON bytes, within the per-workspace and per-process bounds.

    The lookup takes a request thread briefly; the revisions, the diff and its rendering are
    the diff pool's, never a request thread's nor the event loop's.
    """
    principal.require(None)
    workspace, kind = await anyio.to_thread.run_sync(_lookup, principal, evidence_id)
    settings = get_settings()
    with admitted.hold(workspace, settings.diff_per_workspace, settings.diff_queue):
        limiter = _pool.limiter(settings.diff_concurrency)
        # Not abandoned on cancel: the admission stays taken until the thread is done, so the
        # bounds count every diff really running.
        return await anyio.to_thread.run_sync(
            _rendered, evidence_id, kind, old, new, limiter=limiter
        )
