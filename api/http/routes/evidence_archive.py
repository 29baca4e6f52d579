"""Routes serving the archived HTTP exchange behind evidence (docs/archive.md): a revision's raw
bytes as received, and a WACZ package of chosen evidence. Included by the evidence router."""

import contextlib
import os
import tempfile
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import FileResponse, StreamingResponse
from starlette.background import BackgroundTask

from api.export_schemas import EvidenceExportRequest
from api.http.deps import PrincipalDep, SessionDep
from api.http.routes.memento import base_of
from api.read_schemas import MAX_SAFE_INTEGER
from api.schemas import UuidParam
from api.services import evidence_archive
from worker.archive.export import MEDIA_TYPE

router = APIRouter()

RevisionParam = Annotated[int, Query(ge=1, le=MAX_SAFE_INTEGER)]


def raw_revision(
    evidence_id: UuidParam,
    revision: RevisionParam,
    request: Request,
    principal: PrincipalDep,
    session: SessionDep,
) -> Response:
    """The body the origin sent for one evidence revision, as the archive received it.

    The payload of the revision's archived response record (for a revisit, of the response it
    refers to), streamed from the WARC file, with the origin's `Content-Type`, and as a memento
    (RFC 7089): `Memento-Datetime` and a `Link` to the original URL, its TimeGate and TimeMap.
    404 when the revision has no archived exchange (the archive off, or purged)."""
    raw = evidence_archive.raw_revision(session, principal, evidence_id, revision, base_of(request))
    if request.method == "HEAD":
        raw.close()
        return Response(headers=raw.headers, media_type=raw.media_type)
    return StreamingResponse(raw.chunks(), headers=raw.headers, media_type=raw.media_type)


router.add_api_route(
    "/{evidence_id:uuid}/raw", raw_revision, methods=["GET"], response_class=Response
)
# Memento clients ask with HEAD: the same headers, without the body.
router.add_api_route(
    "/{evidence_id:uuid}/raw", raw_revision, methods=["HEAD"], include_in_schema=False
)


@router.post("/exports", response_class=Response)
def export_evidence(
    body: EvidenceExportRequest, principal: PrincipalDep, session: SessionDep
) -> Response:
    """A WACZ package (`application/wacz`) of the workspace's archived exchanges: every
    evidence item's, or those of `evidence_ids`.

    Written to a temporary file, then streamed from it: a failure is an error envelope, never a
    package cut short. 400 or 404 with every bad item in `details.items`; 413
    (`details.reason` `export_too_large`) over EVIDENCE_EXPORT_MAX_BYTES; 429 past the
    workspace's read rate, or while this process writes as many exports as it may at once."""
    workspace_id = body.workspace
    chosen = evidence_archive.select_export(session, principal, workspace_id, body.evidence_ids)
    session.close()  # the copy reads files only: the connection goes back to the pool
    handle = tempfile.NamedTemporaryFile(prefix="export-", suffix=".wacz", delete=False)  # noqa: SIM115
    try:
        with handle, evidence_archive.export_slot():
            evidence_archive.write_export(chosen, handle)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(handle.name)
        raise
    return FileResponse(
        handle.name,
        media_type=MEDIA_TYPE,
        filename=evidence_archive.export_filename(workspace_id, datetime.now(UTC)),
        background=BackgroundTask(os.unlink, handle.name),
    )
