"""Image search and lookup (research_image_search, research_get_image)."""

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.errors import ApiError, error_response
from api.http.deps import PrincipalDep, SessionDep
from api.read_schemas import ImageGetRequest, ImageSearchRequest
from api.services import image_fetch, read

router = APIRouter(prefix="/research-api/images", tags=["read"])


@router.post("/search")
def search(
    body: ImageSearchRequest, principal: PrincipalDep, session: SessionDep
) -> dict[str, Any]:
    """Images of the workspace's evidence whose captions match the query, best first."""
    return read.search_images(session, principal, body)


@router.post("/get", response_model=None)
async def get(body: ImageGetRequest, principal: PrincipalDep) -> dict[str, Any] | JSONResponse:
    """One image by id, with its bytes (base64) when include_bytes is true.

    Async on purpose: the fetch of the bytes runs in its own bounded pool
    (api.services.image_fetch), so the route never holds a request thread while an origin takes
    its time.
    """
    try:
        return await image_fetch.get_image(principal, body)
    except ApiError as exc:
        if exc.status not in (429, 503):
            raise
        response = error_response(exc)
        response.headers["Retry-After"] = str(image_fetch.retry_after(exc))
        return response
