"""Quote verification through the real API and worker: retrieve, then verify quotes against the
revision; offsets, chunks, cues and links checked against what the other routes serve; every bad
item's envelope; workspace walls, scope and the read rate."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import unquote

import pytest

from api.services import admission as quotas
from api.services import read_admission
from tests.read.test_read_e2e import FILLER, story
from tests.support.factories import Api, check_envelope, make_key
from tests.support.read_client import ReadApi
from tests.support.tls_site import TLSSite
from worker.domain import clock
from worker.lanes import quota_overrides as quota_store
from worker.store import db

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]

ROUTE = "evidence/quotes/verify"
ABSENT = "Glaciers in the southern range retreated faster than any model predicted."


@pytest.fixture
def read(api: Api) -> ReadApi:
    return ReadApi(api)


@pytest.fixture
def marker() -> str:
    return "quorvel" + uuid.uuid4().hex[:8]


@pytest.fixture(autouse=True)
def _fresh_buckets() -> Any:
    quotas.overrides.clear()
    quotas.readers.reset()
    read_admission.reset()
    yield
    quotas.overrides.clear()
    quotas.readers.reset()
    read_admission.reset()


def caption_file(marker: str) -> str:
    cues = [
        ("00:00:01.000", "00:00:03.000", f"Welcome to the {marker} river talk."),
        ("00:00:03.000", "00:00:05.500", "Today we follow the water"),
        ("00:00:05.500", "00:00:08.000", "from the glacier to the sea."),
    ]
    body = "\n\n".join(f"{a} --> {b}\n{text}" for a, b, text in cues)
    return f"WEBVTT\nLanguage: en\n\n{body}\n"


def verify(read: ReadApi, workspace: uuid.UUID, *quotes: dict[str, Any]) -> list[dict[str, Any]]:
    payload = {"workspace_id": str(workspace), "quotes": list(quotes)}
    return list(read.ok(ROUTE, payload)["result"]["quotes"])


def evidence_of(read: ReadApi, done: dict[str, Any]) -> dict[str, Any]:
    evidence_id = done["evidence"]["evidence_id"]
    return dict(read.api.evidence(evidence_id).json()["evidence"])


class TestVerify:
    """Retrieve through the worker, then verify; each answer checked against the revision."""

    def test_page_quotes(
        self, read: ReadApi, site: TLSSite, workspace: uuid.UUID, marker: str
    ) -> None:
        """exact, normalized, fuzzy and none; offsets slice the revision's text; chunk ids are
        get_chunk's, anchored around the passage; the links lead to the page and revision."""
        url = site.page(f"/quotes/{marker}", story(marker))
        done = read.retrieve(url, workspace)
        evidence = evidence_of(read, done)
        text = evidence["text"]
        sentence = f"Paragraph 3 about {marker}."
        across = f"{FILLER.strip()}\nParagraph 5 about {marker}."
        ref = {"evidence_id": done["evidence"]["evidence_id"]}
        answers = verify(
            read,
            workspace,
            {**ref, "quote": sentence},
            {**ref, "quote": "  " + across.upper().replace(" ", "  ")},
            {**ref, "quote": FILLER.replace("forty", "fifty").replace("dawn", "sunrise")},
            {**ref, "quote": ABSENT},
            {**ref, "quote": f"Paragraph 2 about {marker}. to capture the daily swing"},
        )
        assert [a["match"] for a in answers] == ["exact", "normalized", "fuzzy", "none", "none"]
        for answer in answers[:3]:
            assert text[answer["start"] : answer["end"]] == answer["text"]
            assert answer["revision"] == done["evidence"]["revision"]
            assert answer["revision_url"].endswith(f"?revision={answer['revision']}")
            assert (
                answer["context_before"]
                == text[: answer["start"]][-len(answer["context_before"]) :]
                or not answer["context_before"]
            )
            assert answer["chunk_ids"]
            for chunk_id in answer["chunk_ids"]:
                chunk = read.ok("chunks/get", {"chunk_id": chunk_id})["result"]["chunk"]
                assert chunk["char_start"] < answer["end"] and chunk["char_end"] > answer["start"]
                assert text[chunk["char_start"] : chunk["char_end"]] == chunk["text"]
        exact, normalized, fuzzy = answers[:3]
        assert (exact["score"], exact["text"]) == (100.0, sentence)
        assert normalized["text"] == across and "\n" in normalized["text"]
        assert 90 <= fuzzy["score"] < 100 and fuzzy["occurrences"] >= 1
        link = exact["fragment_url"]
        assert link.startswith(url + "#:~:text=")
        assert unquote(link.split("#:~:text=", 1)[1]).endswith(sentence)
        assert "," in normalized["fragment_url"].split("#:~:text=")[1]  # textStart,textEnd
        assert answers[3] == {
            **ref,
            "revision": done["evidence"]["revision"],
            "match": "none",
            "score": None,
            "start": None,
            "end": None,
            "text": None,
            "occurrences": 0,
            "chunk_ids": [],
            "cues": [],
            "context_before": None,
            "context_after": None,
            "fragment_url": None,
            "revision_url": answers[3]["revision_url"],
        }
        path = answers[0]["revision_url"]
        shown = read.api.client.get(path, headers=read.api.headers)
        assert shown.status_code == 200 and shown.json()["evidence"]["text"] == text

    def test_caption_quotes_name_their_cues(
        self, read: ReadApi, site: TLSSite, workspace: uuid.UUID, marker: str
    ) -> None:
        """A quote across two cues names both, with their times; captions get no fragment."""
        url = site.page(f"/quotes/{marker}.vtt", caption_file(marker), content_type="text/vtt")
        done = read.retrieve(url, workspace, kind="published_captions")
        ref = {"evidence_id": done["evidence"]["evidence_id"]}
        (answer,) = verify(read, workspace, {**ref, "quote": "follow the water from the glacier"})
        assert answer["match"] == "normalized"  # a line break in the text, a space in the quote
        assert [(c["index"], c["start_ms"], c["end_ms"]) for c in answer["cues"]] == [
            (1, 3_000, 5_500),
            (2, 5_500, 8_000),
        ]
        assert answer["fragment_url"] is None
        assert answer["chunk_ids"]

    def test_revisions(
        self, read: ReadApi, site: TLSSite, workspace: uuid.UUID, marker: str
    ) -> None:
        """The latest revision by default; an older one when asked; one that does not exist is
        a 400 naming the item's revision."""
        path = f"/quotes/{marker}/changing"
        first = read.retrieve(site.page(path, story(marker)), workspace)
        changed = story(marker).replace("forty mountain lakes", "nine coastal rivers")
        second = read.retrieve(site.page(path, changed), workspace)
        assert second["evidence"]["revision"] == first["evidence"]["revision"] + 1
        ref = {"evidence_id": first["evidence"]["evidence_id"]}
        quote = "measured the water of forty mountain lakes over three summers"
        latest, old = verify(
            read, workspace, {**ref, "quote": quote}, {**ref, "revision": 1, "quote": quote}
        )
        assert (latest["match"], latest["revision"]) == ("none", 2)
        assert (old["match"], old["revision"]) == ("exact", 1)
        payload = {
            "workspace_id": str(workspace),
            "quotes": [{**ref, "quote": quote}, {**ref, "revision": 3, "quote": quote}],
        }
        error = check_envelope(read.call(ROUTE, payload), 400, "invalid_input")
        assert error["field"] == "quotes[1].revision"


class TestRefusals:
    """Every bad input is the envelope naming its field; walls never leak."""

    @pytest.fixture
    def ref(
        self, read: ReadApi, site: TLSSite, workspace: uuid.UUID, marker: str
    ) -> dict[str, str]:
        done = read.retrieve(site.page(f"/quotes/{marker}", story(marker)), workspace)
        return {"evidence_id": done["evidence"]["evidence_id"]}

    def test_malformed_items(
        self, read: ReadApi, workspace: uuid.UUID, ref: dict[str, str]
    ) -> None:
        """Each malformed item, among good ones, fails the call naming it."""
        good = {**ref, "quote": "Paragraph"}
        cases: list[tuple[Any, str]] = [
            ({**ref, "quote": ""}, "quotes[1].quote"),
            ({**ref, "quote": " \n\t"}, "quotes[1].quote"),
            ({**ref, "quote": "x" * 10_001}, "quotes[1].quote"),
            ({**ref}, "quotes[1].quote"),
            ({"quote": "q"}, "quotes[1].evidence_id"),
            ({**ref, "quote": 7}, "quotes[1].quote"),
            ({"evidence_id": "not-a-uuid", "quote": "q"}, "quotes[1].evidence_id"),
            ({**ref, "quote": "q", "revision": 0}, "quotes[1].revision"),
            ({**ref, "quote": "q", "revision": None}, "quotes[1].revision"),
            ({**ref, "quote": "q", "revision": "1"}, "quotes[1].revision"),
            ({**ref, "quote": "q", "extra": 1}, "quotes[1].extra"),
            ("a string", "quotes[1]"),
            (None, "quotes[1]"),
            ({**ref, "quote": "nul \x00"}, "quotes[1].quote"),
        ]
        for item, field in cases:
            payload = {"workspace_id": str(workspace), "quotes": [good, item]}
            error = check_envelope(read.call(ROUTE, payload), 400, "invalid_input")
            assert error["field"] == field, (item, error)
        assert read.ok(
            ROUTE,
            {"workspace_id": str(workspace), "quotes": [good, {**ref, "quote": "x" * 10_000}]},
        )

    def test_malformed_bodies(
        self, read: ReadApi, workspace: uuid.UUID, ref: dict[str, str]
    ) -> None:
        """No quotes, too many, a bad context size, an unknown field: 400 naming it."""
        ws = str(workspace)
        item = {**ref, "quote": "Paragraph"}
        cases: list[tuple[dict[str, Any], str]] = [
            ({"workspace_id": ws, "quotes": []}, "quotes"),
            ({"workspace_id": ws, "quotes": [item] * 101}, "quotes"),
            ({"workspace_id": ws}, "quotes"),
            ({"quotes": [item]}, "workspace_id"),
            ({"workspace_id": ws, "quotes": [item], "context_chars": 501}, "context_chars"),
            ({"workspace_id": ws, "quotes": [item], "other": 1}, "other"),
        ]
        for payload, field in cases:
            error = check_envelope(read.call(ROUTE, payload), 400, "invalid_input")
            assert error["field"] == field, (payload, error)
        assert len(verify(read, workspace, *[item] * 100)) == 100

    def test_the_largest_body(
        self, read: ReadApi, workspace: uuid.UUID, ref: dict[str, str]
    ) -> None:
        """100 quotes of 10 000 characters, non-ASCII (6 MB as JSON escapes): all answered."""
        quote = ("Été " * 2_500)[:10_000]
        answers = verify(read, workspace, *[{**ref, "quote": quote}] * 100)
        assert [a["match"] for a in answers] == ["none"] * 100

    def test_walls(
        self, read: ReadApi, api: Api, workspace: uuid.UUID, ref: dict[str, str]
    ) -> None:
        """Another workspace's evidence is not found, exactly like an unknown id (also once its
        revision is kept folded); a key of another workspace, or without the scope, or none,
        is refused."""
        other = uuid.uuid4()
        other_read = ReadApi(Api(api.client, make_key([other])))
        quote = {**ref, "quote": "Paragraph"}
        # Checked once by its owner first: the revision is then kept folded in this process,
        # and the walls must still hold.
        assert verify(read, workspace, quote)[0]["match"] == "exact"
        for reader, ws in ((other_read, other), (other_read, workspace), (read, other)):
            error = check_envelope(
                reader.call(ROUTE, {"workspace_id": str(ws), "quotes": [quote]}), 404, "not_found"
            )
            assert error["field"] == "quotes[0].evidence_id"
        unknown = {"evidence_id": str(uuid.uuid4()), "quote": "Paragraph"}
        payload = {"workspace_id": str(workspace), "quotes": [quote, unknown]}
        missing = check_envelope(read.call(ROUTE, payload), 404, "not_found")
        assert missing == {**missing, "field": "quotes[1].evidence_id"}
        body = {"workspace_id": str(workspace), "quotes": [quote]}
        scopeless = Api(api.client, make_key([workspace], scopes=("other:scope",)))
        url = f"/research-api/{ROUTE}"
        check_envelope(
            api.client.post(url, json=body, headers=scopeless.headers), 403, "not_entitled"
        )
        check_envelope(api.client.post(url, json=body), 401, "not_entitled")

    def test_read_rate(self, read: ReadApi, workspace: uuid.UUID, ref: dict[str, str]) -> None:
        """A call costs a read token per 10 quotes: 100 quotes take a burst of 10, the next call
        is 429 rate_limited with Retry-After."""
        override = quota_store.Override(workspace, None, None, None, read_rate=0.01, read_burst=10)
        db.with_transient_retry(lambda s: quota_store.set_override(s, override, clock.now()))
        quotas.overrides.clear()
        item = {**ref, "quote": "Paragraph"}
        assert len(verify(read, workspace, *[item] * 100)) == 100
        refused = read.call(ROUTE, {"workspace_id": str(workspace), "quotes": [item]})
        error = check_envelope(refused, 429, "rate_limited")
        assert refused.headers["Retry-After"] == str(error["details"]["retry_after_seconds"])
