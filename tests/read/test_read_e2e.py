"""The read side end to end: pages and caption files retrieved by the real worker, then
searched and read back over HTTP; every payload is validated against its tool's schema."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest

from tests.support.factories import Api, check_envelope, make_key
from tests.support.read_client import ReadApi
from tests.support.read_schemas import validate_get_chunk, validate_get_image
from tests.support.tls_site import TLSSite

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PNG = (FIXTURES / "images" / "python.png").read_bytes()
JPEG = (FIXTURES / "images" / "python.jpg").read_bytes()
FILLER = (
    "Researchers measured the water of forty mountain lakes over three summers, "
    "sampling at dawn and at dusk to capture the daily swing in dissolved oxygen. "
)


def story(marker: str, lang: str = "en", images: str = "", extra: str = "") -> str:
    """An article whose paragraphs carry a unique `marker` word, with optional figures."""
    paragraphs = "\n".join(
        f"<p>Paragraph {n} about {marker}. {FILLER * 2}</p>" for n in range(1, 9)
    )
    return f"""<!doctype html><html lang="{lang}"><head><meta charset="utf-8">
<title>Lakes of {marker}</title>{images}</head><body>
<article><h1>Lakes of {marker}</h1>{extra}{paragraphs}</article></body></html>"""


def vtt(marker: str) -> str:
    cues = "\n\n".join(
        f"00:00:{2 * n:02d}.000 --> 00:00:{2 * n + 1:02d}.500\nCue {n}: the {marker} river rises."
        for n in range(1, 8)
    )
    return f"WEBVTT\nLanguage: en\n\n{cues}\n"


@pytest.fixture
def read(api: Api) -> ReadApi:
    return ReadApi(api)


@pytest.fixture
def marker() -> str:
    """A word no other test's pages contain."""
    return "zorbel" + uuid.uuid4().hex[:8]


def search(read: ReadApi, workspace: uuid.UUID, query: str, **extra: object) -> list[dict]:
    payload = {"workspace_id": str(workspace), "query": query, **extra}
    return read.ok("chunks/search", payload)["result"]["chunks"]


class TestChunks:
    """Passages of retrieved pages and caption files, searched and fetched by id."""

    def test_page_passages_search_and_get(
        self, read: ReadApi, site: TLSSite, workspace: uuid.UUID, marker: str
    ) -> None:
        """A retrieved page is split into whole paragraphs that search finds and get returns."""
        url = site.page(f"/read/{marker}", story(marker))
        done = read.retrieve(url, workspace)
        hits = search(read, workspace, f"{marker} oxygen")
        assert hits, "the page's passages are searchable"
        assert all(marker in hit["text"] and hit["score"] > 0 for hit in hits)
        assert {hit["title"] for hit in hits} == {f"Lakes of {marker}"}
        assert len({hit["report_id"] for hit in hits}) == 1
        paragraphs = {f"Paragraph {n} about {marker}. {FILLER * 2}".strip() for n in range(1, 9)}
        lines = [line for hit in hits for line in hit["text"].split("\n") if line]
        assert set(lines) <= paragraphs | {f"Lakes of {marker}"}, "whole paragraphs only"
        got = read.ok("chunks/get", {"chunk_id": hits[0]["chunk_id"]})["result"]["chunk"]
        assert got == {**hits[0], "score": 0.0}
        evidence = read.api.evidence(done["evidence"]["evidence_id"]).json()["evidence"]
        assert hits[0]["text"].split("\n")[0] in evidence["text"]
        # Each chunk is cited back into its revision: the text sliced by its anchor.
        for hit in hits:
            assert (hit["evidence_id"], hit["revision"]) == (
                done["evidence"]["evidence_id"],
                done["evidence"]["revision"],
            )
            assert evidence["text"][hit["char_start"] : hit["char_end"]] == hit["text"]

    def test_stemmed_query_matches(
        self, read: ReadApi, site: TLSSite, workspace: uuid.UUID, marker: str
    ) -> None:
        """The search is language-aware: a singular query finds the plural in the text."""
        read.retrieve(site.page(f"/read/{marker}", story(marker)), workspace)
        assert search(read, workspace, f"{marker} lake summer")

    def test_caption_file_passages(
        self, read: ReadApi, site: TLSSite, workspace: uuid.UUID, marker: str
    ) -> None:
        """A caption file is split at whole cues and filtered by kind."""
        url = site.page(f"/read/{marker}.vtt", vtt(marker), content_type="text/vtt")
        done = read.retrieve(url, workspace, kind="published_captions")
        hits = search(read, workspace, marker, kind="published_captions")
        assert hits and hits[0]["text"].startswith("Cue 1: the")
        evidence = read.api.evidence(done["evidence"]["evidence_id"]).json()["evidence"]
        for hit in hits:
            got = read.ok("chunks/get", {"chunk_id": hit["chunk_id"]})["result"]["chunk"]
            assert evidence["text"][got["char_start"] : got["char_end"]] == got["text"]
        assert all(text.endswith("rises.") for text in (h["text"] for h in hits))
        assert search(read, workspace, marker, kind="url_text") == []

    def test_language_filter(
        self, read: ReadApi, site: TLSSite, workspace: uuid.UUID, marker: str
    ) -> None:
        """The language filter compares primary subtags."""
        read.retrieve(site.page(f"/read/{marker}", story(marker, lang="fr-CA")), workspace)
        assert search(read, workspace, marker, language="fr")
        assert search(read, workspace, marker, language="en") == []

    def test_new_revision_keeps_old_chunk_ids(
        self, read: ReadApi, site: TLSSite, workspace: uuid.UUID, marker: str
    ) -> None:
        """A changed page makes a new revision: old chunk ids still resolve, search shows new."""
        path = f"/read/{marker}"
        read.retrieve(site.page(path, story(marker)), workspace)
        old = search(read, workspace, marker, limit=50)
        changed = story(marker, extra=f"<p>Update: {marker} froze early this year.</p>")
        done = read.retrieve(site.page(path, changed), workspace)
        assert done["evidence"]["revision"] == 2
        new = search(read, workspace, marker, limit=50)
        assert "froze early" in new[0]["text"] or any("froze" in h["text"] for h in new)
        assert not {h["chunk_id"] for h in old} & {h["chunk_id"] for h in new}
        again = read.ok("chunks/get", {"chunk_id": old[0]["chunk_id"]})["result"]["chunk"]
        assert again["text"] == old[0]["text"]

    def test_miss_and_bad_input(self, read: ReadApi) -> None:
        """An unknown id is a null chunk; an empty id is invalid_input naming the field."""
        assert read.ok("chunks/get", {"chunk_id": "ch_nope"}) == {"result": {"chunk": None}}
        error = check_envelope(read.call("chunks/get", {"chunk_id": ""}), 400, "invalid_input")
        assert error["field"] == "chunk_id"


class TestImages:
    """Images recorded from a retrieved page, searched by caption, fetched with bytes."""

    @pytest.fixture
    def page(self, site: TLSSite, marker: str) -> dict[str, str]:
        base = f"/read/{marker}"
        urls = {
            "png": site.page(f"{base}/lake.png", PNG, content_type="image/png"),
            "jpeg": site.page(f"{base}/gear.png", JPEG, content_type="image/png"),
            "fake": site.page(f"{base}/fake.png", "<html>nope</html>", content_type="image/png"),
        }
        head = f'<meta property="og:image" content="{base}/fake.png">'
        head += f'<meta property="og:image:alt" content="Cover of {marker}">'
        figures = (
            f'<figure><img src="{base}/lake.png" alt="lake"><figcaption>{marker} lake at dawn. '
            '<span class="credit">Photo: A. Smith</span></figcaption></figure>'
            f'<figure><img src="{base}/gear.png"><figcaption>{marker} sampling gear '
            "© Jane Doe</figcaption></figure>"
        )
        urls["page"] = site.page(base, story(marker, images=head, extra=figures))
        return urls

    def images(self, read: ReadApi, workspace: uuid.UUID, query: str) -> dict[str, dict]:
        payload = {"workspace_id": str(workspace), "query": query}
        found = read.ok("images/search", payload)["result"]["images"]
        return {image["url"].rsplit("/", 1)[1]: image for image in found}

    def test_search_and_get_with_bytes(
        self, read: ReadApi, workspace: uuid.UUID, marker: str, page: dict[str, str]
    ) -> None:
        """Captions and credits are searchable; bytes come back checked by their magic."""
        read.retrieve(page["page"], workspace)
        found = self.images(read, workspace, marker)
        assert set(found) == {"lake.png", "gear.png", "fake.png"}
        lake = found["lake.png"]
        assert (lake["caption"], lake["copyright"]) == (
            f"{marker} lake at dawn.",
            "Photo: A. Smith",
        )
        assert found["gear.png"]["copyright"] == "© Jane Doe"
        assert list(self.images(read, workspace, f"{marker} dawn")) == ["lake.png"]
        plain = read.ok("images/get", {"image_id": lake["image_id"]})["result"]
        assert plain == {"image": {**lake, "score": 0.0}, "bytes_base64": None, "format": "png"}
        full = read.ok("images/get", {"image_id": lake["image_id"], "include_bytes": True})
        assert base64.b64decode(full["result"]["bytes_base64"]) == PNG
        gear = {"image_id": found["gear.png"]["image_id"], "include_bytes": True}
        claimed_png = read.ok("images/get", gear)["result"]
        assert claimed_png["format"] == claimed_png["image"]["format"] == "jpeg"
        assert base64.b64decode(claimed_png["bytes_base64"]) == JPEG

    def test_fake_image_is_refused(
        self, read: ReadApi, workspace: uuid.UUID, marker: str, page: dict[str, str]
    ) -> None:
        """HTML served as image/png is not returned as an image."""
        read.retrieve(page["page"], workspace)
        fake = self.images(read, workspace, f"cover {marker}")["fake.png"]
        response = read.call("images/get", {"image_id": fake["image_id"], "include_bytes": True})
        error = check_envelope(response, 503, "upstream_unavailable")
        assert error["details"] == {"reason": "unsupported_media"}
        assert response.headers["retry-after"]
        validate_get_image(response.json())

    def test_miss(self, read: ReadApi) -> None:
        """An unknown image id is a null image."""
        assert read.ok("images/get", {"image_id": "im_nope", "include_bytes": True}) == {
            "result": {"image": None, "bytes_base64": None, "format": None}
        }


def content(evidence: list[dict], title: str = "Oxygen in alpine lakes") -> dict:
    """Brief content citing `evidence` in one finding."""
    return {
        "title": title,
        "question": "Do alpine lakes lose oxygen at night?",
        "summary": "They do, by a measurable margin.",
        "findings": [
            {
                "id": str(uuid.uuid4()),
                "statement": "Oxygen falls at night.",
                "basis": "observed",
                "evidence": evidence,
                "uncertainty": "Three summers only.",
            }
        ],
        "angles": ["Climate trend"],
        "notes": "",
        "project_id": None,
        "project_revision": None,
        "corpus_snapshot_id": None,
        "language": "en",
    }


class TestBriefs:
    """Briefs with immutable revisions that cite evidence revisions."""

    @pytest.fixture
    def cited(self, read: ReadApi, site: TLSSite, workspace: uuid.UUID, marker: str) -> list:
        done = read.retrieve(site.page(f"/read/{marker}", story(marker)), workspace)
        return [done["evidence"]]

    def test_revisions_review_archive(
        self, read: ReadApi, workspace: uuid.UUID, cited: list[dict]
    ) -> None:
        """Create, revise, review and archive; every revision stays readable as it was."""
        ws = str(workspace)
        first = read.ok("briefs/create", {"workspace_id": ws, "content": content(cited)})["brief"]
        assert (first["revision"], first["archived"], first["reviewed_revision"]) == (
            1,
            False,
            None,
        )
        assert first["content"] == content(cited) | {"findings": first["content"]["findings"]}
        brief_id = first["id"]
        revise = {"workspace_id": ws, "id": brief_id, "content": content(cited, "Second title")}
        second = read.ok("briefs/revise", {**revise, "expected_revision": 1})["brief"]
        assert (second["revision"], second["content"]["title"]) == (2, "Second title")
        stale = read.call("briefs/revise", {**revise, "expected_revision": 1})
        assert check_envelope(stale, 409, "invalid_input")["field"] == "expected_revision"
        get = {"workspace_id": ws, "id": brief_id}
        assert read.ok("briefs/get", {**get, "revision": 1})["brief"]["content"]["title"] == (
            "Oxygen in alpine lakes"
        )
        assert read.ok("briefs/get", get)["brief"]["revision"] == 2
        reviewed = read.ok("briefs/review", {**get, "revision": 1})["brief"]
        assert (reviewed["reviewed_revision"], reviewed["revision"]) == (1, 2)
        unknown = read.call("briefs/review", {**get, "revision": 3})
        assert check_envelope(unknown, 409, "invalid_input")["field"] == "revision"
        archived = read.ok("briefs/archive", get)["brief"]
        assert archived["archived"] is True and archived["updated_at"] >= second["updated_at"]
        late = read.call("briefs/revise", {**revise, "expected_revision": 2})
        assert check_envelope(late, 409, "invalid_input")["field"] == "id"
        missing = read.call("briefs/get", {**get, "revision": 3})
        check_envelope(missing, 404, "not_found")
        null = read.call("briefs/get", {**get, "revision": None})
        assert check_envelope(null, 400, "invalid_input")["field"] == "revision"

    def test_evidence_references_are_checked(
        self, read: ReadApi, workspace: uuid.UUID, cited: list[dict]
    ) -> None:
        """Citing an unknown evidence item or revision is 400 invalid_input naming the field."""
        ws = str(workspace)
        unknown = [{"evidence_id": str(uuid.uuid4()), "revision": 1}]
        response = read.call("briefs/create", {"workspace_id": ws, "content": content(unknown)})
        error = check_envelope(response, 400, "invalid_input")
        assert error["field"] == "content.findings[0].evidence[0].evidence_id"
        future = [cited[0], {**cited[0], "revision": 9}]
        response = read.call("briefs/create", {"workspace_id": ws, "content": content(future)})
        error = check_envelope(response, 400, "invalid_input")
        assert error["field"] == "content.findings[0].evidence[1].revision"
        extra = content(cited) | {"tags": []}
        response = read.call("briefs/create", {"workspace_id": ws, "content": extra})
        check_envelope(response, 400, "invalid_input")


class TestWalls:
    """Another workspace's ids are misses; nothing leaks across keys."""

    def test_other_workspace_sees_nothing(
        self, read: ReadApi, http: object, site: TLSSite, workspace: uuid.UUID, marker: str
    ) -> None:
        """Chunks, images and briefs of one workspace are misses for another workspace's key."""
        url = site.page(
            f"/read/{marker}", story(marker, extra=f'<img src="/a.png" alt="{marker}">')
        )
        done = read.retrieve(url, workspace)
        chunk = search(read, workspace, marker)[0]
        image = read.ok("images/search", {"workspace_id": str(workspace), "query": marker})
        image_id = image["result"]["images"][0]["image_id"]
        ws = str(workspace)
        brief = read.ok(
            "briefs/create", {"workspace_id": ws, "content": content([done["evidence"]])}
        )
        other_ws = uuid.uuid4()
        other = ReadApi(Api(http, make_key([other_ws])))
        assert other.ok("chunks/get", {"chunk_id": chunk["chunk_id"]})["result"]["chunk"] is None
        assert search(other, workspace, marker) == []
        assert search(other, other_ws, marker) == []
        assert other.ok("images/get", {"image_id": image_id})["result"]["image"] is None
        assert other.ok("images/search", {"workspace_id": ws, "query": marker}) == {
            "result": {"images": []}
        }
        ids = {"workspace_id": ws, "id": brief["brief"]["id"]}
        check_envelope(other.call("briefs/get", ids), 404, "not_found")
        check_envelope(other.call("briefs/archive", ids), 404, "not_found")
        moved = {"workspace_id": str(other_ws), "id": brief["brief"]["id"]}
        check_envelope(other.call("briefs/get", moved), 404, "not_found")
        stolen = content([done["evidence"]])
        response = other.call("briefs/create", {"workspace_id": str(other_ws), "content": stolen})
        error = check_envelope(response, 400, "invalid_input")
        assert error["field"] == "content.findings[0].evidence[0].evidence_id"

    def test_scope_and_key_are_required(self, http: object, workspace: uuid.UUID) -> None:
        """Without the scope the answer is not_entitled; without a key, 401; both in envelope."""
        weak = ReadApi(Api(http, make_key([workspace], scopes=("agent:other",))))
        response = weak.call("chunks/get", {"chunk_id": "ch_x"})
        check_envelope(response, 403, "not_entitled")
        validate_get_chunk(response.json())
        anonymous = ReadApi(Api(http, "evk_not-a-key"))
        check_envelope(anonymous.call("images/get", {"image_id": "im_x"}), 401, "not_entitled")
