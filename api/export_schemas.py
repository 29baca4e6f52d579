"""Body of `POST /research-api/evidence/exports` (`worker/contract/evidence_export.input.json`).

The evidence ids are taken as they come (any JSON value) and checked item by item by
`worker.archive.selection`, so that every bad item is reported at once, not only the first.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from api.schemas import UuidText
from worker.archive.selection import MAX_EVIDENCE_IDS


class EvidenceExportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    workspace_id: UuidText
    evidence_ids: Annotated[list[Any], Field(min_length=1, max_length=MAX_EVIDENCE_IDS)] | None = (
        None
    )

    @property
    def workspace(self) -> uuid.UUID:
        return uuid.UUID(self.workspace_id)
