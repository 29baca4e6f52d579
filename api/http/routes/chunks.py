"""Passage search and lookup (research_chunk_search, research_get_chunk)."""

from typing import Any

from fastapi import APIRouter

from api.http.deps import PrincipalDep, SessionDep
from api.read_schemas import ChunkGetRequest, ChunkSearchRequest
from api.services import read

router = APIRouter(prefix="/research-api/chunks", tags=["read"])


@router.post("/search")
def search(
    body: ChunkSearchRequest, principal: PrincipalDep, session: SessionDep
) -> dict[str, Any]:
    """Passages of the workspace's evidence that match the query, best first."""
    return read.search_chunks(session, principal, body)


@router.post("/get")
def get(body: ChunkGetRequest, principal: PrincipalDep, session: SessionDep) -> dict[str, Any]:
    """One passage by id; a miss is a null chunk."""
    return read.get_chunk(session, principal, body.chunk_id)
