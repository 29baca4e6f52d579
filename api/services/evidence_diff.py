"""What changed between two revisions of one evidence item (`GET …/evidence/{id}/diff`).

The same rules as reading a revision: the key needs the research scope, an item in a
workspace it cannot read is answered exactly like an unknown one (404), and so is a revision
the item does not have. `from` may be after `to` (the diff then runs backwards), and equal
revisions are a valid, empty diff.

A diff of two large revisions is tens of milliseconds of pure-Python CPU (1 000 cues; a
20 000-line text up to half a second). On the request threads, 40 at once held all eight of
them and /healthz waited behind them (p50 1.06 s). So a diff takes no request thread: the
lookup that says whose item it is runs in a pool of its own, `EVIDENCE_DIFF_CONCURRENCY`
threads per process, each handing the loading, the diff and its JSON to a diff process
(`diff_processes`: in a thread, they held the GIL the event loop needs), and a workspace (the
key's; a key of several workspaces is bounded as one of its own) has at most
`EVIDENCE_DIFF_PER_WORKSPACE` diffs admitted (running or queued) per process: one more is
answered 429 `rate_limited` with Retry-After at once, as is any past `EVIDENCE_DIFF_QUEUE`
admitted in the process. docs/evidence-diff.md, "Bounds on the work", has the figures.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import anyio.to_thread
from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import not_found
from api.services import diff_processes, diff_render
from api.services.admission import rate_limited
from api.services.evidence_access import readable_item
from api.services.thread_pools import LoopPool
from worker.platform.settings import get_settings
from worker.store.db import read_only_session

#: Retry-After (seconds) of a diff refused over a bound: a diff takes milliseconds to a second.
DIFF_RETRY_AFTER_SECONDS = 1


def _readable(session: Session, principal: Principal, evidence_id: uuid.UUID) -> tuple[str, str]:
    """(workspace, kind) of an item the key can read; 404 as for an unknown one otherwise."""
    evidence = readable_item(session, principal, evidence_id)
    return str(evidence.workspace_id), evidence.kind


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


def _rendered(principal: Principal, evidence_id: uuid.UUID, old: int, new: int) -> bytes:
    """The answer as JSON bytes: whose item it is is looked up here; the revisions are loaded,
    diffed and rendered in a diff process."""
    with read_only_session() as session:
        _, kind = _readable(session, principal, evidence_id)
    processes = get_settings().diff_concurrency
    answer = diff_processes.run(processes, diff_render.render_stored, evidence_id, kind, old, new)
    if isinstance(answer, int):
        raise not_found(f"no such revision: {answer}")
    return answer


def _admitted_as(principal: Principal) -> str:
    """Whose bound a diff counts against: the key's workspace, known before any lookup (a key
    of several workspaces is bounded as one of its own)."""
    if len(principal.workspaces) == 1:
        return str(next(iter(principal.workspaces)))
    return f"key:{principal.key_id}"


async def diff_json(principal: Principal, evidence_id: uuid.UUID, old: int, new: int) -> bytes:
    """The diff answer as JSON bytes, within the per-workspace and per-process bounds.

    The lookup, the revisions, the diff and its rendering are the diff pool's, never a
    request thread's nor the event loop's.
    """
    principal.require(None)
    settings = get_settings()
    with admitted.hold(_admitted_as(principal), settings.diff_per_workspace, settings.diff_queue):
        limiter = _pool.limiter(settings.diff_concurrency)
        # Not abandoned on cancel: the admission stays taken until the thread is done, so the
        # bounds count every diff really running.
        return await anyio.to_thread.run_sync(
            _rendered, principal, evidence_id, old, new, limiter=limiter
        )
