"""URLs are checked once, at the door, by the parser every later step uses (WHATWG).

Malformed URLs the API once accepted (`https://::1/`, a port of `443:22`, …) made the
evidence key raise in the batch lane's group claim, so the whole group failed again and again.
Now each is a 400 naming `url` (a batch item's own 400), over HTTP and MCP; a URL that parses but
is unsafe is still accepted and settled blocked/unsafe_url; and rows stored before the door was
strict settle too, without holding back the batch they are claimed with.
"""

from __future__ import annotations

import uuid

import anyio
import pytest
import sqlalchemy as sa

from tests.support.factories import Api, body, check_envelope, make_key, parked
from tests.support.pages import article
from tests.support.tls_site import TLSSite

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]

#: The malformed URLs found accepted, and the fault the answer must name.
MALFORMED = [
    ("https://::1/", "IPv6 address not in brackets"),
    ("https://93.184.215.14:443:22/", "invalid port: '443:22'"),
    ("https://93.184.215.14:99999/", "invalid port: 99999"),
    ("https://127.0.0.1:+443/", "invalid port: '+443'"),
    ("https://93.184.215.14:443abc/", "invalid port: '443abc'"),
    ("https://", "no host"),
    ("https:///", "no host"),
    ("https://[::1/", "invalid IPv6 address"),
    ("https://256.0.0.1/", "invalid IPv4 address"),
    ("mailto:someone@example.org", "must name a host"),
    ("file:///etc/passwd", "must name a host"),
]
#: Parseable, but the guard refuses them: accepted, then settled blocked/unsafe_url.
UNSAFE = [
    "http://example.org/",
    "ftp://example.org/",
    "https://example.org:8443/",
    "https://10.0.0.1/",
    "https://0x7f.1/",
    "https://%31%32%37.0.0.1/",
    "https://[::ffff:127.0.0.1]/",
    "https://user:pw@example.org/",
]


def recorded(workspace: uuid.UUID) -> int:
    from worker.store import db
    from worker.store.models import Retrieval

    T = Retrieval.__table__.c  # type: ignore[attr-defined]
    query = sa.select(sa.func.count()).where(T.workspace_id == workspace)
    with db.session_scope(readonly=True) as session:
        return int(session.execute(query).scalar_one())


@pytest.fixture
def page(site: TLSSite) -> str:
    path = f"/door/{uuid.uuid4().hex}"
    return site.page(path, article("Doors of lakes", marker=path))


class TestSingles:
    @pytest.mark.parametrize(("url", "fault"), MALFORMED)
    def test_malformed_is_400_naming_url(
        self, api: Api, workspace: uuid.UUID, url: str, fault: str
    ) -> None:
        """400 invalid_input naming `url`, the message naming the fault; nothing recorded."""
        error = check_envelope(api.post(body(url, workspace)), 400, "invalid_input")
        assert error["field"] == "url", error
        assert fault in error["message"], error
        assert recorded(workspace) == 0

    def test_no_host_is_not_called_a_port_problem(self, api: Api, workspace: uuid.UUID) -> None:
        """`https://` once came back as `port not allowed: 443`: the fault is the host."""
        error = check_envelope(api.post(body("https://", workspace)), 400, "invalid_input")
        assert "port" not in error["message"], error

    def test_unsafe_but_parseable_is_accepted_and_blocked(
        self, api: Api, workspace: uuid.UUID
    ) -> None:
        """As the contract allows: recorded (202), then settled blocked/unsafe_url."""
        ids = []
        for url in UNSAFE:
            response = api.post(body(url, workspace))
            assert response.status_code == 202, (url, response.text)
            ids.append(response.json()["retrieval"]["id"])
        for url, retrieval_id in zip(UNSAFE, ids, strict=True):
            done = api.wait(retrieval_id)
            assert done["state"] == "completed", (url, done)
            result = done["result"]
            assert (result["status"], result["reason"]) == ("blocked", "unsafe_url"), (url, done)


class TestBatch:
    def test_each_malformed_item_is_its_own_400(
        self, api: Api, workspace: uuid.UUID, site: TLSSite
    ) -> None:
        """Every malformed item is a 400 naming `url`; every other item is accepted and settles
        as if the malformed ones were absent."""
        pages = [
            site.page(f"/door/batch/{uuid.uuid4().hex}", article(f"Lake {n}")) for n in range(4)
        ]
        good = [body(url, workspace) for url in pages]
        bad = [body(url, workspace) for url, _ in MALFORMED]
        items = [good[0], *bad[:3], good[1], *bad[3:7], good[2], *bad[7:], good[3]]
        results = api.batch(items).json()["results"]
        assert len(results) == len(items)
        for item, result in zip(items, results, strict=True):
            if item in good:
                assert result["status"] == 202, result
            else:
                assert result["status"] == 400, (item["url"], result)
                assert result["error"]["code"] == "invalid_input"
                assert result["error"]["field"] == "url", result
        settled = [
            api.wait(r["retrieval"]["id"], timeout=60) for r in results if r["status"] == 202
        ]
        assert [d["result"]["provenance"]["source_url"] for d in settled] == pages
        assert {(d["state"], d["result"]["status"]) for d in settled} == {("completed", "ready")}

    def test_rows_stored_before_the_door_was_strict_settle(
        self, api: Api, workspace: uuid.UUID, site: TLSSite
    ) -> None:
        """The issue's reproduction: malformed rows among a batch's, in the batch lane, claimed
        in one group. Each malformed one settles blocked/unsafe_url; every other one completes."""
        from worker.store import db
        from worker.store.models import Retrieval

        pages = [site.page(f"/door/old/{uuid.uuid4().hex}", article(f"Tarn {n}")) for n in range(6)]
        malformed = [url for url, _ in MALFORMED[:5]]
        urls = [*pages[:3], *malformed, *pages[3:]]
        ids = parked(workspace, lane="batch", urls=urls)
        T = Retrieval.__table__.c  # type: ignore[attr-defined]
        db.with_transient_retry(  # published now: the sweep hands them to the batch lane
            lambda s: s.execute(
                sa.update(Retrieval)
                .where(T.id.in_([uuid.UUID(i) for i in ids]))
                .values(published_at=None)
            )
        )
        done = {url: api.wait(i, timeout=90) for url, i in zip(urls, ids, strict=True)}
        for url in pages:
            assert (done[url]["state"], done[url]["result"]["status"]) == ("completed", "ready")
        for url in malformed:
            result = done[url]["result"]
            assert done[url]["state"] == "completed", done[url]
            assert (result["status"], result["reason"]) == ("blocked", "unsafe_url"), done[url]


class TestMcp:
    @pytest.mark.parametrize(("url", "fault"), MALFORMED[:6])
    def test_malformed_argument_is_invalid_input_naming_url(
        self, workspace: uuid.UUID, url: str, fault: str
    ) -> None:
        """The MCP tool refuses the same URLs the same way, and records nothing."""
        from api.mcp.server import call
        from api.mcp.tools import REGISTRY
        from tests.mcp.support import error_of

        key = make_key([workspace])
        tool = REGISTRY["sosoapi_research_evidence_retrieve"]
        result = anyio.run(call, tool, f"Bearer {key}", body(url, workspace))
        error = error_of(result, "invalid_input")
        assert error["field"] == "url", error
        assert fault in error["message"], error
        assert recorded(workspace) == 0
