"""Memento (RFC 7089) routes over evidence revisions: a TimeMap and a TimeGate per original
URL and workspace (docs/memento.md). Each revision's answer, `GET /research-api/evidence/{id}
?revision=N`, is its memento (URI-M). HEAD answers as GET does, without the body: Memento
clients ask with HEAD."""

from typing import Annotated
from urllib.parse import unquote

from fastapi import APIRouter, Header, Request, Response

from api.http.deps import PrincipalDep, SessionDep
from api.schemas import UuidParam
from api.services import memento

#: Included by the evidence router: `/research-api/evidence/memento/…`.
router = APIRouter(prefix="/memento")

AcceptDatetime = Annotated[
    str | None,
    Header(
        description="RFC 7089: the datetime wanted, as an RFC 1123 date in GMT "
        "(`Sun, 06 Nov 1994 08:49:37 GMT`); the latest revision when absent.",
    ),
]


def base_of(request: Request) -> str:
    """The absolute base every URI-M, TimeGate and TimeMap link names."""
    return str(request.base_url).rstrip("/")


def path_url(request: Request, decoded: str, marker: str) -> str:
    """The original URL in the path as the client sent it.

    The router hands the path over decoded, which changes what some URLs say (`a%2Fb` is not
    `a/b`), so it is read from the raw path after `marker`. An original sent wholly encoded
    (`https%3A%2F%2F…`, as some clients do) is decoded once.
    """
    raw = request.scope.get("raw_path")
    if not raw:
        return decoded
    _, found, rest = raw.decode("latin-1").partition(marker)
    if not found:
        return decoded
    return unquote(rest) if rest.lower().startswith(("http%3a", "https%3a")) else rest


def timemap(
    workspace_id: UuidParam,
    url: str,
    request: Request,
    principal: PrincipalDep,
    session: SessionDep,
) -> Response:
    """The TimeMap of an original URL in the workspace.

    In `application/link-format` (RFC 7089 §5): the original, its TimeGate, the map itself
    (`self`, with `from` and `until`) and every evidence revision of the URL as a `memento`
    with its `datetime`, oldest first. The URL is the rest of the path, its query the
    request's."""
    base = base_of(request)
    original = memento.original_of(path_url(request, url, "/timemap/"), request.url.query)
    found = memento.url_mementos(session, principal, workspace_id, original, base)
    return Response(memento.timemap(found, base), media_type=memento.LINK_FORMAT)


def timegate(
    workspace_id: UuidParam,
    url: str,
    request: Request,
    principal: PrincipalDep,
    session: SessionDep,
    accept_datetime: AcceptDatetime = None,
) -> Response:
    """The TimeGate of an original URL in the workspace.

    RFC 7089 §4.1, pattern 2.2: 302 to the revision closest to `Accept-Datetime` (the latest
    without it), with `Vary: accept-datetime` and a `Link` naming the original, the TimeMap
    and the first, last, previous and next mementos. 400 for a malformed `Accept-Datetime`."""
    base = base_of(request)
    at = memento.accept_datetime(accept_datetime)
    original = memento.original_of(path_url(request, url, "/timegate/"), request.url.query)
    found = memento.url_mementos(session, principal, workspace_id, original, base)
    location, links = memento.timegate(found, at, base)
    headers = {"Location": location, "Vary": "accept-datetime", "Link": links}
    return Response(status_code=302, headers=headers)


for path, endpoint in (
    ("/{workspace_id}/timemap/{url:path}", timemap),
    ("/{workspace_id}/timegate/{url:path}", timegate),
):
    router.add_api_route(path, endpoint, methods=["GET"], response_class=Response)
    router.add_api_route(path, endpoint, methods=["HEAD"], include_in_schema=False)
