"""Memento (RFC 7089) over evidence revisions: the TimeMap, the TimeGate and each revision's
memento headers, through the API (PostgreSQL or SQLite), then the `memento-client` package
against `evidence api` served on loopback.

Revisions are recorded as the worker records them (`evidence.record`), at chosen times.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from memento_client import MementoClient

from api.services import memento_format as fmt
from tests.conftest import Env
from tests.support.factories import Api, check_envelope, make_key
from tests.support.served import served_api
from worker.content.results import Content, Kind, content_result
from worker.store import db, evidence

pytestmark = pytest.mark.lifecycle

T0 = datetime(2026, 6, 1, 9, 0, 0, 250_000, tzinfo=UTC)
#: When the three revisions of `lake` were recorded: day 0, day 1, day 3.
DAYS = (0, 1, 3)
MEMENTO = "/research-api/evidence/memento"


def record(workspace: uuid.UUID, url: str, kind: Kind, text: str, when: datetime) -> tuple:
    content = Content(text=text, title="Lake", source_url=url)
    result = content_result(kind, content, when)
    return db.with_transient_retry(
        lambda s: evidence.record(s, workspace, kind, url, result, when)
    )[:2]


def lake(workspace: uuid.UUID, url: str) -> list[tuple[uuid.UUID, int]]:
    """Three revisions of `url` at T0 + DAYS, oldest first."""
    return [
        record(workspace, url, "url_text", f"The lake on day {day}.", T0 + timedelta(days=day))
        for day in DAYS
    ]


def new_url() -> str:
    return f"https://example.org/lake/{uuid.uuid4().hex}?season=summer&year=2026"


def get(api: Api, path: str, **headers: str) -> httpx.Response:
    response = api.client.get(path, headers={**api.headers, **headers}, follow_redirects=False)
    assert response.status_code != 500, response.text
    return response


def timegate(api: Api, workspace: uuid.UUID, url: str, when: datetime | None) -> httpx.Response:
    extra = {} if when is None else {"Accept-Datetime": fmt.http_date(when)}
    return get(api, f"{MEMENTO}/{workspace}/timegate/{url}", **extra)


def revision_of(location: str) -> tuple[str, int]:
    path, _, query = location.partition("?revision=")
    return path.rsplit("/", 1)[1], int(query)


class TestTimeMap:
    def test_lists_every_revision(self, api: Api, workspace: uuid.UUID) -> None:
        url = new_url()
        revisions = lake(workspace, url)
        response = get(api, f"{MEMENTO}/{workspace}/timemap/{url}")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/link-format"
        links = fmt.parse_links(response.text)
        base = "http://testserver"
        assert [(link.target, link.rels) for link in links[:3]] == [
            (url, {"original"}),
            (f"{base}{MEMENTO}/{workspace}/timegate/{url}", {"timegate"}),
            (f"{base}{MEMENTO}/{workspace}/timemap/{url}", {"self"}),
        ]
        first, last = (fmt.http_date(T0.replace(microsecond=0) + timedelta(days=d)) for d in (0, 3))
        assert (links[2].params["from"], links[2].params["until"]) == (first, last)
        mementos = links[3:]
        assert [revision_of(link.target) for link in mementos] == [
            (str(e), n) for e, n in revisions
        ]
        assert [link.params["datetime"] for link in mementos] == [
            fmt.http_date(T0.replace(microsecond=0) + timedelta(days=d)) for d in DAYS
        ]
        assert [link.rels for link in mementos] == [
            {"first", "memento"},
            {"memento"},
            {"last", "memento"},
        ]

    def test_every_item_of_the_url(self, api: Api, workspace: uuid.UUID) -> None:
        """A URL kept as two items (kinds) lists both items' revisions, by datetime."""
        url = new_url()
        text = record(workspace, url, "url_text", "Page.", T0)
        captions = record(workspace, url, "published_captions", "Cue.", T0 + timedelta(hours=1))
        assert text[0] != captions[0]
        links = fmt.parse_links(get(api, f"{MEMENTO}/{workspace}/timemap/{url}").text)
        assert [revision_of(link.target) for link in links[3:]] == [
            (str(text[0]), 1),
            (str(captions[0]), 1),
        ]

    def test_url_spellings_find_one_key(self, api: Api, workspace: uuid.UUID) -> None:
        """The path's URL is normalised as evidence URLs are: case of scheme and host, default
        port, fragment, and a slash merged away by a proxy."""
        path = f"/lake/{uuid.uuid4().hex}"
        lake(workspace, f"https://example.org{path}")
        for spelling in (
            f"HTTPS://Example.ORG:443{path}#top",
            f"https:/example.org{path}",
            f"https%3A%2F%2Fexample.org{path}",
        ):
            response = get(api, f"{MEMENTO}/{workspace}/timemap/{spelling}")
            assert response.status_code == 200, (spelling, response.text)
            assert fmt.parse_links(response.text)[0].target == f"https://example.org{path}"

    def test_escapes_in_the_path_are_kept(self, api: Api, workspace: uuid.UUID) -> None:
        """`%2F` and `%20` in the original's path are the original's: not decoded away."""
        url = f"https://example.org/a%2Fb/{uuid.uuid4().hex}%20c"
        lake(workspace, url)
        for route in ("timemap", "timegate"):
            response = get(api, f"{MEMENTO}/{workspace}/{route}/{url}")
            assert response.status_code in (200, 302), response.text
        links = fmt.parse_links(get(api, f"{MEMENTO}/{workspace}/timemap/{url}").text)
        assert links[0].target == url


class TestTimeGate:
    @pytest.mark.parametrize(
        ("when", "expected"),
        [
            (None, 3),  # no Accept-Datetime: the latest
            (T0 - timedelta(days=365), 1),  # before the first
            (T0, 1),
            (T0 + timedelta(hours=11), 1),
            (T0 + timedelta(hours=12), 1),  # equally far from day 0 and day 1: before
            (T0 + timedelta(hours=13), 2),
            (T0 + timedelta(days=2), 2),  # equally far from day 1 and day 3: before
            (T0 + timedelta(days=2, seconds=1), 3),
            (T0 + timedelta(days=3650), 3),  # after the last
        ],
    )
    def test_redirects_to_the_closest(
        self, api: Api, workspace: uuid.UUID, when: datetime | None, expected: int
    ) -> None:
        url = new_url()
        revisions = lake(workspace, url)
        response = timegate(api, workspace, url, when)
        assert response.status_code == 302, response.text
        assert revision_of(response.headers["location"]) == (
            str(revisions[expected - 1][0]),
            expected,
        )
        assert response.headers["vary"] == "accept-datetime"
        links = {link.target: link for link in fmt.parse_links(response.headers["link"])}
        assert links[url].rels == {"original"}
        timemaps = [link for link in links.values() if "timemap" in link.rels]
        assert [t.target for t in timemaps] == [
            f"http://testserver{MEMENTO}/{workspace}/timemap/{url}"
        ]
        chosen = links[response.headers["location"]]
        assert "memento" in chosen.rels and "datetime" in chosen.params

    def test_malformed_accept_datetime(self, api: Api, workspace: uuid.UUID) -> None:
        url = new_url()
        lake(workspace, url)
        for bad in ("yesterday", "2026-06-01T09:00:00Z", "Tue, 01 Jun 2026 09:00:00 GMT", ""):
            response = get(api, f"{MEMENTO}/{workspace}/timegate/{url}", **{"Accept-Datetime": bad})
            error = check_envelope(response, 400, "invalid_input")
            assert error["field"] == "Accept-Datetime"


class TestRevisionIsAMemento:
    def test_headers(self, api: Api, workspace: uuid.UUID) -> None:
        url = new_url()
        revisions = lake(workspace, url)
        evidence_id, number = revisions[1]
        for method in ("GET", "HEAD"):
            response = api.client.request(
                method,
                f"/research-api/evidence/{evidence_id}",
                params={"revision": number},
                headers=api.headers,
            )
            assert response.status_code == 200, response.text
            assert response.headers["memento-datetime"] == fmt.http_date(
                T0.replace(microsecond=0) + timedelta(days=1)
            )
            links = fmt.parse_links(response.headers["link"])
            base = f"http://testserver{MEMENTO}/{workspace}"
            assert [(link.target, link.rels) for link in links] == [
                (url, {"original"}),
                (f"{base}/timegate/{url}", {"timegate"}),
                (f"{base}/timemap/{url}", {"timemap"}),
            ]
        assert response.content == b""  # HEAD

    def test_latest_without_revision_is_not_a_memento(self, api: Api, workspace: uuid.UUID) -> None:
        """Without `revision` the answer changes as revisions come: no Memento-Datetime."""
        evidence_id, _ = lake(workspace, new_url())[0]
        response = api.evidence(str(evidence_id))
        assert response.status_code == 200
        assert "memento-datetime" not in response.headers


class TestRefusals:
    def test_unknown_url_is_404(self, api: Api, workspace: uuid.UUID) -> None:
        for route in ("timemap", "timegate"):
            response = get(api, f"{MEMENTO}/{workspace}/{route}/{new_url()}")
            check_envelope(response, 404, "not_found")

    def test_another_workspace_is_404_alike(self, api: Api, workspace: uuid.UUID) -> None:
        """Another workspace's URL, asked under either workspace id, answers as an unknown one."""
        other = uuid.uuid4()
        url = new_url()
        lake(other, url)
        for owner in (workspace, other):
            for route in ("timemap", "timegate"):
                response = get(api, f"{MEMENTO}/{owner}/{route}/{url}")
                error = check_envelope(response, 404, "not_found")
                assert error["message"] == "no evidence of that URL"
        owner_api = Api(api.client, make_key([other]))
        assert get(owner_api, f"{MEMENTO}/{other}/timemap/{url}").status_code == 200

    @pytest.mark.parametrize("url", ["not-a-url", "ftp://example.org/x", "https://", "https:"])
    def test_not_an_http_url_is_400(self, api: Api, workspace: uuid.UUID, url: str) -> None:
        error = check_envelope(
            get(api, f"{MEMENTO}/{workspace}/timemap/{url}"), 400, "invalid_input"
        )
        assert error["field"] == "url"

    def test_bad_workspace_id_and_no_key(self, api: Api, workspace: uuid.UUID) -> None:
        check_envelope(get(api, f"{MEMENTO}/not-a-uuid/timemap/{new_url()}"), 400, "invalid_input")
        response = api.client.get(f"{MEMENTO}/{workspace}/timegate/{new_url()}")
        check_envelope(response, 401, "not_entitled")
        scopeless = Api(api.client, make_key([workspace], scopes=("other",)))
        check_envelope(
            get(scopeless, f"{MEMENTO}/{workspace}/timemap/{new_url()}"), 403, "not_entitled"
        )


@pytest.fixture
def origin() -> Iterator[str]:
    """A loopback stand-in for the original site: memento-client asks the URL it is given
    (HEAD) before the TimeGate; it answers 404 with no links, as a page long gone would."""

    class Gone(BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Gone)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class TestMementoClient:
    def test_finds_the_right_revision(self, env: Env, origin: str, tmp_path: Path) -> None:
        """The official client, through the served TimeGate, for datetimes around each revision."""
        workspace = uuid.uuid4()
        url = f"{origin}/lake/{uuid.uuid4().hex}?season=summer"
        revisions = lake(workspace, url)
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {make_key([workspace])}"
        with served_api(tmp_path / "api.log", workers=1) as api_url:
            client = MementoClient(
                timegate_uri=f"{api_url}{MEMENTO}/{workspace}/timegate/",
                check_native_timegate=False,
                session=session,
            )
            cases = {
                T0 - timedelta(days=30): 1,
                T0 + timedelta(hours=2): 1,
                T0 + timedelta(days=1, hours=1): 2,
                T0 + timedelta(days=2, hours=6): 3,
                T0 + timedelta(days=300): 3,
            }
            for when, expected in cases.items():
                info = client.get_memento_info(url, when.replace(tzinfo=None))
                closest = info["mementos"]["closest"]
                assert closest["http_status_code"] == 200
                evidence_id, number = revisions[expected - 1]
                assert closest["uri"] == [
                    f"{api_url}/research-api/evidence/{evidence_id}?revision={number}"
                ], when
                day = DAYS[expected - 1]
                assert closest["datetime"] == (
                    T0.replace(microsecond=0, tzinfo=None) + timedelta(days=day)
                )
                assert info["original_uri"] == url
                assert info["mementos"]["first"]["uri"][0].endswith("?revision=1")
                assert info["mementos"]["last"]["uri"][0].endswith("?revision=3")


class TestDocumented:
    def test_openapi_describes_the_routes(self, http: Any) -> None:
        """/openapi.json: the TimeMap's link-format (its example reads back), the TimeGate's
        redirect headers and Accept-Datetime, a revision's memento headers."""
        paths = http.get("/openapi.json").json()["paths"]
        timemap = paths[f"{MEMENTO}/{{workspace_id}}/timemap/{{url}}"]["get"]
        media = timemap["responses"]["200"]["content"]["application/link-format"]
        assert [link.rels for link in fmt.parse_links(media["example"])][:3] == [
            {"original"},
            {"timegate"},
            {"self"},
        ]
        gate = paths[f"{MEMENTO}/{{workspace_id}}/timegate/{{url}}"]["get"]
        assert set(gate["responses"]["302"]["headers"]) == {"Location", "Vary", "Link"}
        assert {p["name"] for p in gate["parameters"]} == {"workspace_id", "url", "accept-datetime"}
        revision = paths["/research-api/evidence/{evidence_id}"]["get"]["responses"]["200"]
        assert set(revision["headers"]) == {"Memento-Datetime", "Link"}
