"""Memento (RFC 7089) over evidence revisions: TimeMaps, TimeGate choices, and the headers a
revision's answer (its URI-M) carries. docs/memento.md says what we chose.

Per workspace: a URL with no revision in the key's workspace, or a workspace the key may not
read, is answered 404 alike, so existence never leaks.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import invalid_input, not_found
from api.services import memento_format as fmt
from api.services.read_admission import admit_read_side
from worker.domain import urls
from worker.store import mementos as memento_store

PREFIX = "/research-api/evidence/memento"
LINK_FORMAT = "application/link-format"


def timegate_path(workspace_id: uuid.UUID | str, original: str) -> str:
    return f"{PREFIX}/{workspace_id}/timegate/{original}"


def timemap_path(workspace_id: uuid.UUID | str, original: str) -> str:
    return f"{PREFIX}/{workspace_id}/timemap/{original}"


def memento_path(evidence_id: uuid.UUID, revision: int) -> str:
    return f"/research-api/evidence/{evidence_id}?revision={revision}"


def original_of(path_url: str, query: str) -> str:
    """The original URL a TimeGate or TimeMap path names, as evidence keys it.

    The URL is the rest of the path, with the request's query as its own (a client appends the
    original as it is). A slash some clients or proxies merge away (`https:/host`) is put back.
    Raises 400 for anything that is not an http(s) URL with a host.
    """
    text = path_url + (f"?{query}" if query else "")
    for scheme in ("http:/", "https:/"):
        if text.startswith(scheme) and not text.startswith(scheme + "/"):
            text = scheme + "/" + text[len(scheme) :]
    parsed = urls.parse(text)
    if isinstance(parsed, urls.UrlRefusal) or parsed.scheme not in ("http", "https"):
        raise invalid_input(f"not an http(s) URL with a host: {text[:64]!r}", "url")
    return parsed.without_fragment


@dataclass(frozen=True)
class UrlMementos:
    """An original URL's mementos in one workspace, oldest first (never empty)."""

    workspace_id: uuid.UUID
    original: str
    mementos: list[fmt.Memento]


def url_mementos(
    session: Session, principal: Principal, workspace_id: uuid.UUID, original: str, base: str
) -> UrlMementos:
    """The mementos of `original` in the workspace, their URI-Ms absolute under `base`."""
    principal.require(None)
    if not principal.can_read(workspace_id):
        raise not_found("no evidence of that URL")
    admit_read_side(principal, workspace_id)
    rows = memento_store.url_revisions(session, workspace_id, original)
    if not rows:
        raise not_found("no evidence of that URL")
    mementos = [
        fmt.Memento(base + memento_path(r.evidence_id, r.revision), fmt.memento_time(r.created_at))
        for r in rows
    ]
    # Sorted again on the published datetime: rows within one second keep the database's order.
    mementos.sort(key=lambda m: m.datetime)
    return UrlMementos(workspace_id, original, mementos)


def timemap(found: UrlMementos, base: str) -> str:
    return fmt.timemap(
        found.original,
        base + timegate_path(found.workspace_id, found.original),
        base + timemap_path(found.workspace_id, found.original),
        found.mementos,
    )


def accept_datetime(header: str | None) -> datetime | None:
    """`Accept-Datetime`, or None when absent; 400 when it is not an RFC 1123 date."""
    if header is None:
        return None
    try:
        return fmt.parse_http_date(header.strip())
    except fmt.BadHttpDate as error:
        raise invalid_input(str(error), "Accept-Datetime") from None


def timegate(found: UrlMementos, at: datetime | None, base: str) -> tuple[str, str]:
    """The TimeGate's choice for `at` (the latest when None): its URI-M and the `Link` value
    (original, timemap, and the chosen memento with first, last, prev and next)."""
    mementos = found.mementos
    chosen = len(mementos) - 1 if at is None else fmt.closest(mementos, at)
    links = [
        fmt.link(found.original, "original"),
        fmt.link(
            base + timemap_path(found.workspace_id, found.original), "timemap", type=LINK_FORMAT
        ),
    ]
    last = len(mementos) - 1
    for index in sorted({0, last, chosen - 1, chosen, chosen + 1} & set(range(last + 1))):
        named = {"first": 0, "last": last, "prev": chosen - 1, "next": chosen + 1}
        rels = [rel for rel, at_index in named.items() if at_index == index]
        memento = mementos[index]
        links.append(
            fmt.link(
                memento.uri, " ".join([*rels, "memento"]), datetime=fmt.http_date(memento.datetime)
            )
        )
    return mementos[chosen].uri, fmt.joined(links)


def revision_headers(
    workspace_id: uuid.UUID | str, original: str, created_at: datetime, base: str
) -> dict[str, str]:
    """What a revision's answer carries as a memento: `Memento-Datetime` and `Link`."""
    links = [
        fmt.link(original, "original"),
        fmt.link(base + timegate_path(workspace_id, original), "timegate"),
        fmt.link(base + timemap_path(workspace_id, original), "timemap", type=LINK_FORMAT),
    ]
    return {
        "Memento-Datetime": fmt.http_date(fmt.memento_time(created_at)),
        "Link": fmt.joined(links),
    }
