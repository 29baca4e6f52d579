"""Evidence that stays fresh cheaply: conditional revalidation, reuse windows, history, metrics.

Retrievals run through the worker's own entry point (`runner.run_retrieval`: claim, revalidate
or fetch from the loopback site, extract, settle) in this process, against origins that send
strong and weak ETags, only Last-Modified, neither, a wrong 304, and a 304 after a redirect;
one test goes through the API and the real worker. Every retrieval payload is checked against
the contract's output schema (the `Api` client), every evidence answer against its own.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.support.factories import Api
from tests.support.pages import article
from tests.support.tls_site import Page, TLSSite, send

VTT = "text/vtt; charset=utf-8"
CAPTIONS = Path(__file__).parent.parent / "fixtures" / "captions"


@dataclass
class Origin:
    """A page whose body and validators a test sets; it honours conditional GETs."""

    body: bytes
    etag: str | None = None
    last_modified: str | None = None
    content_type: str = "text/html; charset=utf-8"
    #: Answer 304 to every request, validators or not (a broken origin).
    always_304: bool = False
    #: (If-None-Match, If-Modified-Since) of each request, and the status answered.
    seen: list[tuple[str | None, str | None, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, handler: BaseHTTPRequestHandler) -> None:
        inm = handler.headers.get("If-None-Match")
        ims = handler.headers.get("If-Modified-Since")
        matched = (inm is not None and inm == self.etag) or (
            inm is None and ims is not None and ims == self.last_modified
        )
        headers = {}
        if self.etag:
            headers["ETag"] = self.etag
        if self.last_modified:
            headers["Last-Modified"] = self.last_modified
        status = 304 if matched or self.always_304 else 200
        with self.lock:
            self.seen.append((inm, ims, status))
        if status == 304:
            handler.send_response(304)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            return
        send(handler, Page(self.body, self.content_type, 200, headers))

    def statuses(self) -> list[int]:
        return [status for _, _, status in self.seen]


def serve(site: TLSSite, origin: Origin, suffix: str = "") -> str:
    return site.add(f"/fresh/{uuid.uuid4().hex}{suffix}", origin)


def run(
    workspace: uuid.UUID,
    url: str,
    kind: str = "url_text",
    max_age: int | None = None,
) -> str:
    """Record a retrieval no other worker will take, and run it here; its id."""
    from worker.domain import clock
    from worker.retrieval import publication
    from worker.retrieval import records as retrievals
    from worker.retrieval import run as runner
    from worker.store import db

    request = retrievals.NewRetrieval(workspace, uuid.uuid4(), url, kind, None, max_age)

    def record(session: Any) -> uuid.UUID:
        row, _ = retrievals.create_retrieval(session, request, clock.now(), timedelta(hours=1))
        publication.mark_published(session, [row.id], clock.now() + timedelta(days=1))
        return row.id

    retrieval_id = db.with_transient_retry(record)
    assert runner.run_retrieval(retrieval_id)["delivery"] == "settled"
    return str(retrieval_id)


def completed(api: Api, retrieval_id: str, status: str = "ready") -> dict[str, Any]:
    """The settled retrieval, which must have completed with `status` (a timeout or a failure
    also completes: the state alone proves nothing)."""
    retrieval = api.wait(retrieval_id)
    assert retrieval["state"] == "completed", retrieval
    assert retrieval["result"]["status"] == status, retrieval
    return retrieval


def forbid_extraction(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on any extraction fails the retrieval: a revalidated one must not extract."""
    from worker.retrieval import pipeline

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the pipeline ran")

    monkeypatch.setattr(pipeline, "run_pipeline", refuse)


def evidence_of(api: Api, evidence_id: str) -> dict[str, Any]:
    """GET the evidence item, checked against its schema in /openapi.json; its `evidence`."""
    from jsonschema import Draft202012Validator

    from api.http.openapi_schemas import components

    document = api.evidence(evidence_id).json()
    Draft202012Validator(components()["EvidenceResponse"]).validate(document)
    return dict(document["evidence"])


def freshness_counts() -> dict[tuple[str, str], int]:
    from worker.retrieval.freshness import metrics as freshness_metrics

    counts = freshness_metrics.read()
    assert counts is not None
    return counts


def delta(before: dict[tuple[str, str], int], outcome: str, kind: str = "url_text") -> int:
    return freshness_counts().get((outcome, kind), 0) - before.get((outcome, kind), 0)


MODIFIED = "Tue, 01 Dec 2026 00:00:00 GMT"
#: (ETag, Last-Modified) an origin sends; both come back as they came.
VALIDATED = {
    "strong ETag": ('"v1"', None),
    "weak ETag": ('W/"v1"', None),
    "only Last-Modified": (None, MODIFIED),
    "ETag and Last-Modified": ('"v1"', MODIFIED),
}


@pytest.mark.parametrize("name", list(VALIDATED))
def test_unchanged_page_is_revalidated_without_download(
    api: Api, site: TLSSite, workspace: uuid.UUID, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 304 completes from the stored revision: same content and revision, newer retrieved_at."""
    origin = Origin(article(f"Lakes {name}").encode(), *VALIDATED[name])
    url = serve(site, origin)
    first = completed(api, run(workspace, url))
    before = freshness_counts()
    forbid_extraction(monkeypatch)
    second = completed(api, run(workspace, url))

    assert origin.seen == [(None, None, 200), (origin.etag, origin.last_modified, 304)]
    assert second["evidence"] == first["evidence"]
    for key in ("status", "text", "title", "description", "segments", "reason", "warnings"):
        assert second["result"][key] == first["result"][key], key
    later = second["result"]["provenance"]["retrieved_at"]
    assert later > first["result"]["provenance"]["retrieved_at"]
    assert delta(before, "revalidated") == 1
    item = evidence_of(api, first["evidence"]["evidence_id"])
    (listed,) = item["revisions"]
    assert listed["first_seen_at"] == item["created_at"]
    assert listed["last_confirmed_at"] > listed["first_seen_at"]
    assert item["last_confirmed_at"] == listed["last_confirmed_at"]


def test_revalidation_through_the_worker(
    api: Api, site: TLSSite, workspace: uuid.UUID, services: object
) -> None:
    """Through the API and the real worker (its own execution model): the second POST of a
    URL is answered from a 304, the first's validators having been recorded by the worker."""
    from tests.support.factories import body

    origin = Origin(article("Lakes through the worker").encode(), etag='"t1"')
    url = serve(site, origin)
    first = completed(api, api.post(body(url, workspace)).json()["retrieval"]["id"])
    second = completed(api, api.post(body(url, workspace)).json()["retrieval"]["id"])
    assert origin.seen == [(None, None, 200), ('"t1"', None, 304)]
    assert second["evidence"] == first["evidence"]
    assert second["result"]["text"] == first["result"]["text"]


def test_origin_without_validators_is_fetched_again_and_confirmed(
    api: Api, site: TLSSite, workspace: uuid.UUID
) -> None:
    """Neither ETag nor Last-Modified: no conditional request; identical content confirms."""
    origin = Origin(article("Lakes without validators").encode())
    url = serve(site, origin)
    first = completed(api, run(workspace, url))
    before = freshness_counts()
    second = completed(api, run(workspace, url))
    assert origin.seen == [(None, None, 200), (None, None, 200)]
    assert second["evidence"] == first["evidence"]
    assert delta(before, "unchanged") == 1
    item = evidence_of(api, first["evidence"]["evidence_id"])
    assert item["last_confirmed_at"] > item["revisions"][0]["first_seen_at"]


def test_a_304_to_a_request_without_validators_is_a_failure(
    api: Api, site: TLSSite, workspace: uuid.UUID
) -> None:
    """An origin answering 304 to a plain GET gives nothing to stand on: the retrieval fails."""
    origin = Origin(b"", always_304=True)
    retrieval = completed(api, run(workspace, serve(site, origin)), "unavailable")
    assert origin.seen == [(None, None, 304)]
    assert retrieval["evidence"] is None


def test_changed_page_with_a_new_etag_is_downloaded_once(
    api: Api, site: TLSSite, workspace: uuid.UUID
) -> None:
    """A 200 to the conditional request is the new content: one download, a new revision."""
    origin = Origin(article("Lakes, first edition").encode(), etag='"v1"')
    url = serve(site, origin)
    first = completed(api, run(workspace, url))
    origin.body, origin.etag = article("Lakes, second edition").encode(), '"v2"'
    before = freshness_counts()
    second = completed(api, run(workspace, url))
    assert origin.statuses() == [200, 200]
    assert origin.seen[1][0] == '"v1"'
    assert second["evidence"]["evidence_id"] == first["evidence"]["evidence_id"]
    assert second["evidence"]["revision"] == first["evidence"]["revision"] + 1
    assert "second edition" in second["result"]["title"]
    assert delta(before, "new_revision") == 1
    # The next retrieval revalidates with the new validator.
    third = completed(api, run(workspace, url))
    assert origin.seen[2] == ('"v2"', None, 304)
    assert third["evidence"] == second["evidence"]


def test_changed_page_under_the_same_etag_keeps_the_stored_revision(
    api: Api, site: TLSSite, workspace: uuid.UUID
) -> None:
    """The origin's validator is trusted: same ETag, 304, the stored content (documented)."""
    origin = Origin(article("Lakes as first served").encode(), etag='"same"')
    url = serve(site, origin)
    first = completed(api, run(workspace, url))
    origin.body = article("Lakes silently rewritten").encode()
    second = completed(api, run(workspace, url))
    assert origin.statuses() == [200, 304]
    assert second["evidence"] == first["evidence"]
    assert second["result"]["title"] == first["result"]["title"]


def test_a_304_after_a_redirect(api: Api, site: TLSSite, workspace: uuid.UUID) -> None:
    """Validators go through the redirect chain; the final URL's 304 confirms the revision."""
    origin = Origin(article("Lakes behind a redirect").encode(), etag='"r1"')
    final = serve(site, origin)
    start = site.page(
        f"/fresh/moved-{uuid.uuid4().hex}", b"", status=302, headers={"Location": final}
    )
    first = completed(api, run(workspace, start))
    second = completed(api, run(workspace, start))
    assert origin.statuses() == [200, 304]
    assert second["evidence"] == first["evidence"]
    assert second["result"]["provenance"]["source_url"] == final


def test_a_304_from_another_final_url_is_not_the_stored_revision(
    api: Api, site: TLSSite, workspace: uuid.UUID
) -> None:
    """The redirect now ends at another URL, which answers 304 to the validators sent: that
    proves nothing about the stored response (it came from elsewhere), so the retrieval is a
    full one of where the redirect leads now."""
    was = Origin(article("Lakes where the redirect led first").encode(), etag='"m1"')
    now = Origin(article("Rivers where it leads now").encode(), etag='"m1"')
    was_url, now_url = serve(site, was), serve(site, now)
    path = f"/fresh/moving-{uuid.uuid4().hex}"
    start = site.page(path, b"", status=302, headers={"Location": was_url})
    first = completed(api, run(workspace, start))
    site.page(path, b"", status=302, headers={"Location": now_url})
    before = freshness_counts()
    second = completed(api, run(workspace, start))
    assert was.statuses() == [200]
    # The conditional request reached the new URL (a 304, refused), then the full one (200).
    assert now.seen == [('"m1"', None, 304), (None, None, 200)]
    assert second["result"]["provenance"]["source_url"] == now_url
    assert "Rivers" in second["result"]["title"]
    assert second["evidence"]["evidence_id"] != first["evidence"]["evidence_id"]
    assert (delta(before, "revalidated"), delta(before, "new_revision")) == (0, 1)


def test_a_304_counts_only_from_the_stored_final_url() -> None:
    """`accept_not_modified`: a 304 to a request that sent a validator, from the URL the stored
    response came from; not from another URL, not without a validator, never a 200."""
    from worker.fetch.types import FetchedResponse, NotModified
    from worker.retrieval.freshness.conditional import Validator, accept_not_modified

    stored: Validator = {
        "url": "https://a.example/start",
        "final_url": "https://a.example/final",
        "etag": '"v1"',
        "last_modified": None,
    }
    sent = {"If-None-Match": '"v1"'}
    same = NotModified(url="https://a.example/final", headers={})
    assert accept_not_modified(sent, stored, same)
    assert not accept_not_modified(sent, stored, NotModified("https://a.example/start", {}))
    assert not accept_not_modified(sent, stored, NotModified("https://b.example/final", {}))
    assert not accept_not_modified({}, stored, same)
    full = FetchedResponse(
        url="https://a.example/final",
        status_code=200,
        headers={},
        body=b"",
        mime_type="text/html",
        truncated=False,
    )
    assert not accept_not_modified(sent, stored, full)


def test_another_workspace_never_stands_on_this_ones_revision(
    api: Api, site: TLSSite, workspace: uuid.UUID
) -> None:
    """Two more workspaces ask for the URL one workspace fetched: what its request led to is
    its own. Each other one, with a reuse window or without, gets a full retrieval (no reuse,
    no conditional request with the first one's validators) and an evidence item of its own."""
    from tests.support.factories import make_key

    origin = Origin(article("Lakes of one workspace").encode(), etag='"ws"')
    url = serve(site, origin)
    first = completed(api, run(workspace, url))
    before = freshness_counts()
    windowed, plain = uuid.uuid4(), uuid.uuid4()
    answers = [
        completed(Api(api.client, make_key([windowed])), run(windowed, url, max_age=3600)),
        completed(Api(api.client, make_key([plain])), run(plain, url)),
    ]
    assert origin.seen == [(None, None, 200)] * 3
    assert (delta(before, "reused"), delta(before, "revalidated")) == (0, 0)
    assert delta(before, "new_revision") == 2
    items = {r["evidence"]["evidence_id"] for r in [first, *answers]}
    assert len(items) == 3
    # Each workspace's next retrieval stands on its own revision (a 304 with its validators).
    again = completed(api, run(workspace, url))
    assert origin.seen[-1] == ('"ws"', None, 304) and again["evidence"] == first["evidence"]


def test_captions_revalidate_page_and_caption_file(
    api: Api, site: TLSSite, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    """published_captions: the page and its caption file must both answer 304."""
    vtt = Origin((CAPTIONS / "styled.vtt").read_bytes(), etag='"c1"', content_type=VTT)
    vtt_url = serve(site, vtt, ".vtt")
    page = Origin(
        f"<html><body><video><track kind='captions' srclang='en' src='{vtt_url}'>"
        "</video></body></html>".encode(),
        etag='"p1"',
    )
    url = serve(site, page)
    first = completed(api, run(workspace, url, "published_captions"))
    assert first["result"]["segments"], first
    forbid_extraction(monkeypatch)
    second = completed(api, run(workspace, url, "published_captions"))
    assert page.statuses() == [200, 304] and vtt.statuses() == [200, 304]
    assert second["evidence"] == first["evidence"]
    assert second["result"]["segments"] == first["result"]["segments"]


def test_captions_with_a_changed_caption_file_are_fetched_in_full(
    api: Api, site: TLSSite, workspace: uuid.UUID
) -> None:
    """Page 304, caption file 200: a full retrieval that downloads the caption file once."""
    vtt = Origin((CAPTIONS / "styled.vtt").read_bytes(), etag='"c1"', content_type=VTT)
    vtt_url = serve(site, vtt, ".vtt")
    page = Origin(
        f"<html><body><video><track kind='captions' srclang='en' src='{vtt_url}'>"
        "</video></body></html>".encode(),
        etag='"p1"',
    )
    url = serve(site, page)
    first = completed(api, run(workspace, url, "published_captions"))
    vtt.body, vtt.etag = (CAPTIONS / "rolling_auto.vtt").read_bytes(), '"c2"'
    second = completed(api, run(workspace, url, "published_captions"))
    assert page.statuses() == [200, 304, 200]
    assert vtt.statuses() == [200, 200]
    assert second["evidence"]["revision"] == first["evidence"]["revision"] + 1


class TestReuseWindow:
    """`Cache-Control: max-age=N` completes from a revision confirmed within N seconds."""

    def test_within_the_window_nothing_is_fetched(
        self, api: Api, site: TLSSite, workspace: uuid.UUID
    ) -> None:
        """A recent revision answers at once: no request reaches the origin."""
        origin = Origin(article("Lakes reused").encode(), etag='"u1"')
        url = serve(site, origin)
        first = completed(api, run(workspace, url))
        confirmed = evidence_of(api, first["evidence"]["evidence_id"])
        before = freshness_counts()
        second = completed(api, run(workspace, url, max_age=3600))
        assert origin.statuses() == [200]
        assert second["evidence"] == first["evidence"]
        assert second["result"]["text"] == first["result"]["text"]
        assert delta(before, "reused") == 1
        # A reuse is not a confirmation by the origin.
        again = evidence_of(api, first["evidence"]["evidence_id"])
        assert again["last_confirmed_at"] == confirmed["last_confirmed_at"]

    def test_max_age_zero_revalidates(self, api: Api, site: TLSSite, workspace: uuid.UUID) -> None:
        """`max-age=0` reuses nothing confirmed before this instant: it revalidates."""
        origin = Origin(article("Lakes never reused").encode(), etag='"z1"')
        url = serve(site, origin)
        first = completed(api, run(workspace, url))
        confirmed = evidence_of(api, first["evidence"]["evidence_id"])["last_confirmed_at"]
        before = freshness_counts()
        second = completed(api, run(workspace, url, max_age=0))
        assert origin.seen == [(None, None, 200), ('"z1"', None, 304)]
        # Answered from the stored revision, confirmed by the 304 (not reused, not refetched).
        assert second["evidence"] == first["evidence"]
        assert second["result"]["text"] == first["result"]["text"]
        later = second["result"]["provenance"]["retrieved_at"]
        assert later > first["result"]["provenance"]["retrieved_at"]
        assert (delta(before, "revalidated"), delta(before, "reused")) == (1, 0)
        item = evidence_of(api, first["evidence"]["evidence_id"])
        assert item["last_confirmed_at"] > confirmed

    def test_a_window_shorter_than_the_age_revalidates(
        self, api: Api, site: TLSSite, workspace: uuid.UUID
    ) -> None:
        """Confirmed 120 s ago: max-age=150 reuses it, max-age=90 asks the origin (304)."""
        import sqlalchemy as sa

        from worker.domain import clock
        from worker.store import db
        from worker.store.models import EvidenceRevision

        origin = Origin(article("Lakes confirmed a while ago").encode(), etag='"w1"')
        url = serve(site, origin)
        first = completed(api, run(workspace, url))
        ref = first["evidence"]
        T = EvidenceRevision.__table__.c  # type: ignore[attr-defined]
        back = clock.now() - timedelta(seconds=120)
        db.with_transient_retry(
            lambda s: s.execute(
                sa.update(EvidenceRevision)
                .where(T.evidence_id == uuid.UUID(ref["evidence_id"]))
                .values(created_at=back, confirmed_at=back)
            )
        )
        reused = completed(api, run(workspace, url, max_age=150))
        assert origin.statuses() == [200] and reused["evidence"] == ref
        revalidated = completed(api, run(workspace, url, max_age=90))
        assert origin.statuses() == [200, 304] and revalidated["evidence"] == ref
        item = evidence_of(api, ref["evidence_id"])
        assert item["last_confirmed_at"] > clock.isoformat(back + timedelta(seconds=60))

    def test_edges(self) -> None:
        """Age ≤ N reuses, a microsecond more does not; a stale request's revision never."""
        from worker.domain import clock
        from worker.retrieval.freshness.revalidation import may_reuse
        from worker.retrieval.freshness.sources import StoredSource

        confirmed = clock.now()
        source = StoredSource(uuid.uuid4(), 2, 2, [], {}, "", None, None, [], {}, confirmed)
        at_edge = confirmed + timedelta(seconds=60)
        assert may_reuse(60, source, at_edge)
        assert not may_reuse(60, source, at_edge + timedelta(microseconds=1))
        assert may_reuse(0, source, confirmed)
        assert not may_reuse(None, source, confirmed)
        older = StoredSource(uuid.uuid4(), 1, 2, [], {}, "", None, None, [], {}, confirmed)
        assert not may_reuse(60, older, confirmed)


class TestCacheControlHeader:
    """The retrieve routes read `Cache-Control: max-age=N`; a bad one is a 400 naming it."""

    @pytest.mark.parametrize(
        ("values", "expected"),
        [
            (None, None),
            (["no-cache"], None),
            (["max-age=60"], 60),
            (['public, MAX-AGE="0"'], 0),
            (["max-age=99999999999"], 2**31 - 1),
        ],
    )
    def test_parse(self, values: list[str] | None, expected: int | None) -> None:
        """Only max-age counts; it is clamped to what the column holds."""
        from api.services.cache_control import parse_max_age

        assert parse_max_age(values) == expected

    @pytest.mark.parametrize(
        "value", ["max-age=-1", "max-age=soon", "max-age=", "max-age=1,max-age=2"]
    )
    def test_bad_max_age_is_a_400(
        self, api: Api, site: TLSSite, workspace: uuid.UUID, value: str
    ) -> None:
        """A max-age that is not a count of seconds names the header."""
        from tests.support.factories import body, check_envelope

        response = api.client.post(
            "/research-api/evidence/retrieve",
            json=body(site.url("/never-fetched"), workspace),
            headers=api.headers | {"Cache-Control": value},
        )
        error = check_envelope(response, 400, "invalid_input")
        assert error["field"] == "Cache-Control"

    def test_single_and_batch_routes_record_the_window(
        self, api: Api, site: TLSSite, workspace: uuid.UUID
    ) -> None:
        """The window travels with the retrieval to the worker."""
        import sqlalchemy as sa

        from tests.support.factories import body, cancel_open
        from worker.store import db
        from worker.store.models import Retrieval

        url = site.url("/fresh/not-served")
        single = api.client.post(
            "/research-api/evidence/retrieve",
            json=body(url, workspace),
            headers=api.headers | {"Cache-Control": "max-age=90"},
        )
        assert single.status_code == 202, single.text
        batch = api.client.post(
            "/research-api/evidence/retrieve/batch",
            json={"items": [body(url, workspace)]},
            headers=api.headers | {"Cache-Control": "max-age=7"},
        )
        assert batch.status_code == 200, batch.text
        ids = [single.json()["retrieval"]["id"], batch.json()["results"][0]["retrieval"]["id"]]
        cancel_open(workspace)
        T = Retrieval.__table__.c  # type: ignore[attr-defined]
        with db.session_scope(readonly=True) as session:
            ages = dict(
                session.execute(
                    sa.select(T.id, T.max_age_seconds).where(T.id.in_([uuid.UUID(i) for i in ids]))
                ).all()
            )
        assert [ages[uuid.UUID(i)] for i in ids] == [90, 7]


def test_conditional_requests_pass_the_fetch_guard() -> None:
    """A conditional request to a private address is refused as any fetch is."""
    from worker.domain.reasons import Reason
    from worker.fetch.fetcher import Fetcher
    from worker.fetch.types import FetchFailure
    from worker.platform.settings import get_settings

    with Fetcher(get_settings()) as fetcher, pytest.raises(FetchFailure) as failure:
        fetcher.revalidate("https://10.1.2.3/page", {"If-None-Match": '"v1"'})
    assert failure.value.reason is Reason.UNSAFE_URL


def test_metrics_family_renders_the_counts() -> None:
    """`evidence_freshness_outcomes_total` carries each (outcome, kind) count."""
    from api.http.metrics import _freshness_family

    family = _freshness_family({("revalidated", "url_text"): 3, ("reused", "url_text"): 1})
    samples = {(s.labels["outcome"], s.labels["kind"]): s.value for s in family.samples}
    assert family.name == "evidence_freshness_outcomes"
    assert samples == {("revalidated", "url_text"): 3.0, ("reused", "url_text"): 1.0}


def test_the_full_retrieval_after_revalidating_shares_its_fetch_deadline(site: TLSSite) -> None:
    """A fetch after the conditional requests ends by their deadline: none left, a timeout."""
    import time

    from worker.domain.reasons import Reason
    from worker.fetch.fetcher import Fetcher
    from worker.fetch.types import FetchFailure
    from worker.platform.settings import get_settings
    from worker.retrieval.freshness.conditional import PrimedFetcher

    url = site.page(f"/fresh/{uuid.uuid4().hex}", article("Lakes too late"))
    with Fetcher(get_settings()) as fetcher:
        spent = PrimedFetcher(fetcher, {}, deadline=time.monotonic() - 1)
        with pytest.raises(FetchFailure) as failure:
            spent.fetch(url)
        assert failure.value.reason is Reason.TIMEOUT
        assert PrimedFetcher(fetcher, {}, time.monotonic() + 30).fetch(url).status_code == 200


def test_a_group_looks_up_what_each_claim_alone_would(site: TLSSite, workspace: uuid.UUID) -> None:
    """`freshness.look_up_many` (a claim group's two reads) finds for each claim what
    `look_up` finds alone: the stored revision and validators of a fetched URL, nothing for a
    URL never fetched, and the reuse window; the same URL twice and an unknown id too."""
    import sqlalchemy as sa

    from tests.support.factories import cancel_open, parked
    from worker.retrieval import records as retrievals
    from worker.retrieval.freshness import revalidation as freshness
    from worker.store import db

    fetched = serve(site, Origin(article("Grouped").encode(), etag='"g1"'))
    run(workspace, fetched)
    never = serve(site, Origin(article("Never").encode()))
    ids = parked(workspace, urls=[fetched, never, fetched])
    other = uuid.uuid4()  # the fetched URL, asked for in a workspace that never fetched it
    (foreign_id,) = parked(other, urls=[fetched])
    R = retrievals.RETRIEVAL.c
    db.with_transient_retry(  # the third asks for a reuse window
        lambda s: s.execute(
            sa.update(retrievals.RETRIEVAL)
            .where(R.id == uuid.UUID(ids[2]))
            .values(max_age_seconds=60)
        )
    )
    lookups = [
        retrievals.Claim(uuid.UUID(i), 1, url, "url_text", None, workspace, "interactive")
        for i, url in zip(ids, [fetched, never, fetched], strict=True)
    ]
    unknown = retrievals.Claim(uuid.uuid4(), 1, fetched, "url_text", None, workspace, "batch")
    foreign = retrievals.Claim(
        uuid.UUID(foreign_id), 1, fetched, "url_text", None, other, "interactive"
    )
    claims = [*lookups, unknown, foreign]
    grouped = db.with_transient_retry(lambda s: freshness.look_up_many(s, claims))
    alone = [db.with_transient_retry(lambda s, c=c: freshness.look_up(s, c)) for c in claims]
    assert grouped == alone
    stored = grouped[0][1]
    assert stored is not None and stored.validators and grouped[2] == (60, stored)
    assert grouped[1] == (None, None) and grouped[3] == (None, None)
    assert grouped[4] == (None, None), "another workspace's revision"
    cancel_open(other)
