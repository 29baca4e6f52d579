"""The archived exchange behind evidence, served: a revision's raw bytes, and WACZ exports.

Both follow every read route's rules: scope `agent:research`, another workspace's ids answered
as unknown ones (404), a read token of the workspace's read rate (429). docs/archive.md says
what is served and why.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import ApiError, not_found
from api.services import memento
from api.services.admission import rate_limited
from api.services.evidence_access import readable_revision
from api.services.read_admission import admit_read_side
from worker.archive import export, reader, selection
from worker.platform.settings import get_settings
from worker.store import archive_reads
from worker.store.archive_reads import IndexedExchange

#: The origin's bytes are served from the API's own origin: never as a page that runs there.
RAW_SAFETY_HEADERS = {
    "Content-Security-Policy": "sandbox",
    "X-Content-Type-Options": "nosniff",
}
NO_ARCHIVE = "no archived exchange for that revision (the archive was off, or it was purged)"
#: Exports one API process writes at once: each holds a thread of the route pool, and at the
#: default limit some 35 s of CPU (docs/archive.md). Past it, 429 at once.
EXPORTS_AT_ONCE = 2
EXPORT_RETRY_AFTER_SECONDS = 10
_export_slots = threading.BoundedSemaphore(EXPORTS_AT_ONCE)


@contextlib.contextmanager
def export_slot() -> Iterator[None]:
    """One of this process's export slots for the block, or 429 `rate_limited` at once."""
    if not _export_slots.acquire(blocking=False):
        raise rate_limited(
            f"{EXPORTS_AT_ONCE} exports are being written here; retry later",
            EXPORT_RETRY_AFTER_SECONDS,
        )
    try:
        yield
    finally:
        _export_slots.release()


@dataclass
class RawRevision:
    """A revision's archived response, open: its headers, then its payload in chunks."""

    headers: dict[str, str]
    media_type: str
    _payload: reader.Payload
    _close: contextlib.ExitStack

    def chunks(self) -> Iterator[bytes]:
        try:
            yield from self._payload.chunks()
        finally:
            self._close.close()

    def close(self) -> None:
        self._close.close()


def _first_payload(
    session: Session, workspace_id: uuid.UUID, rows: Sequence[IndexedExchange]
) -> IndexedExchange | None:
    """The response record holding the revision's payload: its first archived exchange's, or
    the response that exchange's revisit refers to."""
    for row in rows:
        if row.record_type == "response":
            return row
        if row.record_type == "revisit" and row.refers_to:
            found = archive_reads.responses(session, workspace_id, [row.refers_to])
            if row.refers_to in found:
                return found[row.refers_to]
    return None


def raw_revision(
    session: Session, principal: Principal, evidence_id: uuid.UUID, revision: int, base: str
) -> RawRevision:
    """The archived response body of a revision, as received, with its memento headers."""
    principal.require(None)
    admit_read_side(principal)
    item, row = readable_revision(session, principal, evidence_id, revision)
    rows = archive_reads.revision_exchanges(session, evidence_id, revision)
    exchange = _first_payload(session, item.workspace_id, rows)
    if exchange is None:
        raise not_found(NO_ARCHIVE)
    stack = contextlib.ExitStack()
    try:
        payload = stack.enter_context(reader.open_payload(get_settings().archive_dir, exchange))
    except reader.ArchiveUnreadable:
        stack.close()
        raise not_found(NO_ARCHIVE) from None
    headers = {
        **memento.revision_headers(item.workspace_id, item.url_key, row.created_at, base),
        **RAW_SAFETY_HEADERS,
    }
    if payload.truncated:
        # The fetch stopped at its byte bound: these are the first bytes the origin sent.
        headers["X-Archive-Truncated"] = "length"
    media_type = payload.content_type or "application/octet-stream"
    return RawRevision(headers, media_type, payload, stack)


@dataclass(frozen=True)
class ExportSelection:
    """What one export copies, checked and within the limit."""

    workspace_id: uuid.UUID
    exchanges: list[IndexedExchange]
    pages: list[selection.Page]
    selected_bytes: int


def _refuse_items(items: list[selection.BadItem], status: int, message: str) -> ApiError:
    first = items[0]
    return ApiError(
        status,
        "not_found" if status == 404 else "invalid_input",
        message,
        f"evidence_ids[{first.index}]",
        {"items": [item.as_dict() for item in items]},
    )


def select_export(
    session: Session,
    principal: Principal,
    workspace_id: uuid.UUID,
    evidence_ids: Sequence[object] | None,
    *,
    admit: bool = True,
    max_bytes: int | None = None,
) -> ExportSelection:
    """Check an export's request and choose its exchanges (nothing is read from the files).

    400 with every malformed item (`details.items`: not a UUID, a duplicate); 404 with every id
    that is not an evidence item of the workspace (unknown and another workspace's alike), or
    when the workspace is not the key's or nothing of the selection is archived; 413
    (`details.reason` `export_too_large`) over EVIDENCE_EXPORT_MAX_BYTES: the API answers
    size limits so, and never 422."""
    principal.require(None)
    if not principal.can_read(workspace_id):
        raise not_found("no such workspace")
    if admit:
        admit_read_side(principal, workspace_id)
    ids: list[uuid.UUID] | None = None
    if evidence_ids is not None:
        ids, bad = selection.parse_evidence_ids(evidence_ids)
        if bad:
            raise _refuse_items(bad, 400, f"{len(bad)} malformed evidence id(s): nothing exported")
        known = archive_reads.evidence_in_workspace(session, workspace_id, ids)
        missing = selection.not_found(evidence_ids, known)
        if missing:
            raise _refuse_items(missing, 404, f"{len(missing)} evidence id(s) not in the workspace")
    limit = get_settings().export_max_bytes if max_bytes is None else max_bytes
    # Summed in the database first: the rows of an export far over the limit are never loaded.
    _check_size(archive_reads.stored_bytes(session, workspace_id, ids), limit)
    chosen = archive_reads.workspace_exchanges(session, workspace_id, ids)
    responses = archive_reads.responses(session, workspace_id, selection.referred(chosen))
    exchanges = selection.with_referred(chosen, responses)
    if not exchanges:
        raise not_found("nothing archived for that selection")
    total = selection.export_bytes(exchanges)  # with the responses revisits refer to
    _check_size(total, limit)
    return ExportSelection(workspace_id, exchanges, selection.pages(exchanges), total)


def _check_size(total: int, limit: int) -> None:
    if selection.over_limit(total, limit):
        raise ApiError(
            413,
            "invalid_input",
            f"the export would copy {total} archived bytes, over the limit of {limit}: "
            "name fewer evidence items",
            "evidence_ids",
            {"reason": "export_too_large", "selected_bytes": total, "max_bytes": limit},
        )


def write_export(chosen: ExportSelection, out: IO[bytes], directory: Path | None = None) -> Any:
    """Write the WACZ of `chosen` to `out`; what it holds (`worker.archive.export.Exported`)."""
    try:
        return export.write_wacz(
            directory or get_settings().archive_dir,
            chosen.exchanges,
            chosen.pages,
            out,
            title=f"Evidence of workspace {chosen.workspace_id}",
            created=datetime.now(UTC),
        )
    except reader.ArchiveUnreadable as error:
        # Purged or moved between the selection and the copy: nothing half-written is served.
        raise not_found(f"an archived record is no longer readable: {error}") from None


def export_filename(workspace_id: uuid.UUID, at: datetime) -> str:
    return f"evidence-{workspace_id}-{at.astimezone(UTC).strftime('%Y%m%dT%H%M%SZ')}.wacz"
