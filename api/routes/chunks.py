"""Passage search and lookup (research_chunk_search, research_get_chunk)."""

from typing import Any

from fastapi import APIRouter

from api import read_service
from api.deps import PrincipalDep, SessionDep
from api.read_schemas import ChunkGetRequest, ChunkSearchRequest

router = APIRouter(prefix="/research-api/chunks", tags=["read"])


@router.post("/search")
def search(
    body: ChunkSearchRequest, principal: PrincipalDep, session: SessionDep
) -> dict[str, Any]:
    """Passages of the workspace's evidence that match the query, best first."""
    return read_service.search_chunks(session, principal, body)


@router.post("/get")
def get(body: ChunkGetRequest, principal: PrincipalDep, session: SessionDep) -> dict[str, Any]:
    """One passage by id; a miss is a null chunk."""
    return read_service.get_chunk(session, principal, body.chunk_id)
