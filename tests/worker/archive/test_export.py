"""The archived exchange served: a revision's raw bytes, and WACZ exports that the real tools
open. `wacz validate` (py-wacz, as a process) accepts every export, warcio reads every record
back with its digests checked, and pywb (a `wayback` process on loopback, started once for the
module) replays the archived bytes from an export.

Retrievals run through the worker's own entry point in this process (as in
test_warc_archive.py), with the archive in the test's own directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import subprocess
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner
from warcio.archiveiterator import ArchiveIterator

from tests.lifecycle.test_freshness import Origin, completed, run, serve
from tests.support.factories import Api, check_envelope, make_key
from tests.support.pages import article
from tests.support.pywb import Pywb
from tests.support.tls_site import TLSSite
from tests.worker.archive.test_warc_archive import rows, sha256

ROOT = Path(__file__).resolve().parents[3]
WACZ = ROOT / ".venv" / "bin" / "wacz"
EXPORTS = "/research-api/evidence/exports"


@pytest.fixture
def archive_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from worker.platform.settings import get_settings

    directory = tmp_path / "archive"
    monkeypatch.setattr(get_settings(), "archive_dir", directory)
    return directory


@pytest.fixture(scope="module")
def pywb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pywb]:
    server = Pywb(tmp_path_factory.mktemp("pywb"))
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Archived:
    """Three evidence items of one workspace, archived: `a` fetched then confirmed by a 304,
    `b` another page, `c` another URL that sent `a`'s very bytes (a revisit of `a`'s)."""

    a_url: str
    b_url: str
    c_url: str
    a_body: bytes
    b_body: bytes
    a: dict[str, Any]
    b: dict[str, Any]
    c: dict[str, Any]
    retrievals: list[str]

    def evidence_id(self, name: str) -> str:
        retrieval: dict[str, Any] = getattr(self, name)
        return str(retrieval["evidence"]["evidence_id"])


def archive_three(api: Api, site: TLSSite, workspace: uuid.UUID) -> Archived:
    a_body = article(f"Archived lake {uuid.uuid4().hex}").encode()
    b_body = article(f"Another lake {uuid.uuid4().hex}").encode()
    a_origin = Origin(a_body, etag='"a1"')
    a_url = serve(site, a_origin)
    b_url = serve(site, Origin(b_body))
    c_url = serve(site, Origin(a_body))
    a = completed(api, run(workspace, a_url))
    a_again = completed(api, run(workspace, a_url))  # a 304: a revisit
    b = completed(api, run(workspace, b_url))
    c = completed(api, run(workspace, c_url))  # a's payload again: a revisit of a's response
    assert a_origin.statuses() == [200, 304]
    ids = [a["id"], a_again["id"], b["id"], c["id"]]
    assert [r.record_type for r in rows(ids)] == ["response", "revisit", "response", "revisit"]
    return Archived(a_url, b_url, c_url, a_body, b_body, a, b, c, ids)


def raw_path(evidence_id: str, revision: int = 1) -> str:
    return f"/research-api/evidence/{evidence_id}/raw?revision={revision}"


def get(api: Api, path: str, method: str = "GET") -> httpx.Response:
    response = api.client.request(method, path, headers=api.headers)
    assert response.status_code != 500, response.text
    return response


class TestRawBytes:
    def test_the_archived_body_with_its_memento_headers(
        self, api: Api, site: TLSSite, workspace: uuid.UUID, archive_dir: Path
    ) -> None:
        found = archive_three(api, site, workspace)
        for name, body in (("a", found.a_body), ("b", found.b_body), ("c", found.a_body)):
            evidence_id = found.evidence_id(name)
            response = get(api, raw_path(evidence_id))
            assert response.status_code == 200, response.text
            assert response.content == body  # c: the payload of the response it refers to
            assert response.headers["content-type"] == "text/html; charset=utf-8"
            assert response.headers["content-security-policy"] == "sandbox"
            assert response.headers["x-content-type-options"] == "nosniff"
            assert "x-archive-truncated" not in response.headers
            # The memento headers are the revision's own (its URI-M's).
            memento = get(api, f"/research-api/evidence/{evidence_id}?revision=1")
            for header in ("memento-datetime", "link"):
                assert response.headers[header] == memento.headers[header], header
            assert 'rel="original"' in response.headers["link"]
            assert 'rel="timegate"' in response.headers["link"]
            head = get(api, raw_path(evidence_id), "HEAD")
            assert head.status_code == 200 and head.content == b""
            assert head.headers["memento-datetime"] == response.headers["memento-datetime"]
            assert head.headers["content-type"] == response.headers["content-type"]

    def test_refusals_look_alike(
        self, api: Api, site: TLSSite, workspace: uuid.UUID, archive_dir: Path
    ) -> None:
        """Another workspace's key gets the unknown id's 404; a revision without an archived
        exchange, or whose file is gone, is a 404 in the envelope; a missing revision is 400."""
        url = serve(site, Origin(article("Private lake").encode()))
        evidence_id = completed(api, run(workspace, url))["evidence"]["evidence_id"]
        other = Api(api.client, make_key([uuid.uuid4()]))
        theirs = check_envelope(get(other, raw_path(evidence_id)), 404, "not_found")
        unknown = check_envelope(get(api, raw_path(str(uuid.uuid4()))), 404, "not_found")
        assert theirs == unknown
        check_envelope(get(api, raw_path(evidence_id, 2)), 404, "not_found")
        error = check_envelope(
            get(api, f"/research-api/evidence/{evidence_id}/raw"), 400, "invalid_input"
        )
        assert error["field"] == "revision"
        # Recorded with the archive off: the revision exists, its exchange was never archived.
        from tests.read.test_memento import T0, record

        unarchived, _ = record(
            workspace, f"https://example.org/{uuid.uuid4().hex}", "url_text", "Text.", T0
        )
        error = check_envelope(get(api, raw_path(str(unarchived))), 404, "not_found")
        assert "no archived exchange" in error["message"]
        # Its file gone (moved away by hand; retention deletes rows first).
        for path in archive_dir.iterdir():
            path.rename(path.with_name("moved-" + path.name))
        error = check_envelope(get(api, raw_path(evidence_id)), 404, "not_found")
        assert "no archived exchange" in error["message"]


def wacz_validate(path: Path) -> str:
    done = subprocess.run(
        [str(WACZ), "validate", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation succeeded, the passed WACZ is valid" in done.stdout, done.stdout
    return done.stdout


@dataclass
class Opened:
    """An export read back: its records (type, headers, payload) and its index and pages."""

    names: list[str]
    records: list[tuple[str, Any, bytes]]
    cdxj: list[tuple[str, str, dict[str, Any]]]
    pages: list[dict[str, Any]]


def open_export(path: Path) -> Opened:
    """Check the package as a reader would: every file listed in datapackage.json with its
    sha256 and size, the digest file right, every record's digests checked by warcio, every
    CDXJ line pointing at its record."""
    with zipfile.ZipFile(path) as package:
        names = package.namelist()
        described = package.read("datapackage.json")
        document = json.loads(described)
        assert document["wacz_version"] == "1.1.1"
        assert document["profile"] == "data-package"
        listed = {r["path"]: r for r in document["resources"]}
        assert set(listed) == set(names) - {"datapackage.json", "datapackage-digest.json"}
        for name, resource in listed.items():
            data = package.read(name)
            assert resource["hash"] == "sha256:" + hashlib.sha256(data).hexdigest(), name
            assert resource["bytes"] == len(data), name
        digest = json.loads(package.read("datapackage-digest.json"))
        assert digest == {
            "path": "datapackage.json",
            "hash": "sha256:" + hashlib.sha256(described).hexdigest(),
        }
        (warc_name,) = [n for n in names if n.startswith("archive/")]
        assert package.getinfo(warc_name).compress_type == zipfile.ZIP_STORED
        warc = package.read(warc_name)
        cdxj = []
        for line in package.read("indexes/index.cdx").decode().splitlines():
            key, stamp, fields = line.split(" ", 2)
            cdxj.append((key, stamp, json.loads(fields)))
        page_lines = package.read("pages/pages.jsonl").decode().splitlines()
    header = json.loads(page_lines[0])
    assert header["format"] == "json-pages-1.0"
    records = []
    offsets = {}
    iterator = ArchiveIterator(io.BytesIO(warc), check_digests=True)
    for record in iterator:
        payload = record.raw_stream.read()
        record.raw_stream.read()
        assert record.digest_checker.passed is not False, record.digest_checker.problems
        if record.rec_type in ("response", "request", "metadata"):
            assert record.digest_checker.passed is True, record.rec_type
        if record.rec_type == "response":
            assert sha256(payload) == record.rec_headers.get_header("WARC-Payload-Digest")
        offsets[iterator.get_record_offset()] = record.rec_type
        records.append((record.rec_type, record.rec_headers, payload))
    for _, _, fields in cdxj:
        assert fields["filename"] == warc_name.removeprefix("archive/")
        assert offsets[int(fields["offset"])] in ("response", "revisit"), fields
    return Opened(names, records, cdxj, [json.loads(line) for line in page_lines[1:]])


def post_export(api: Api, body: dict[str, Any]) -> httpx.Response:
    response = api.client.post(EXPORTS, json=body, headers=api.headers)
    assert response.status_code != 500, response.text
    return response


def cli(*args: str) -> Any:
    from api.cli.main import app

    return CliRunner().invoke(app, ["export", *args], catch_exceptions=False)


def timestamp(opened: Opened, url: str) -> str:
    """The CDXJ timestamp of `url`'s response record."""
    stamps = [s for _, s, f in opened.cdxj if f["url"] == url and f.get("mime") != "warc/revisit"]
    assert stamps, (url, opened.cdxj)
    return stamps[0]


class TestExport:
    def test_api_and_cli_exports_open_in_the_real_tools(
        self,
        api: Api,
        site: TLSSite,
        workspace: uuid.UUID,
        archive_dir: Path,
        tmp_path: Path,
        pywb: Pywb,
    ) -> None:
        found = archive_three(api, site, workspace)
        # The API, naming c only: c's revisit and the response it refers to (a's).
        response = post_export(
            api, {"workspace_id": str(workspace), "evidence_ids": [found.evidence_id("c")]}
        )
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/wacz"
        assert ".wacz" in response.headers["content-disposition"]
        only_c = tmp_path / "c.wacz"
        only_c.write_bytes(response.content)
        wacz_validate(only_c)
        opened = open_export(only_c)
        kinds = [kind for kind, _, _ in opened.records]
        assert kinds == ["request", "response", "metadata", "request", "revisit", "metadata"]
        assert [h.get_header("WARC-Target-URI") for k, h, _ in opened.records if k != "request"][
            ::2
        ] == [found.a_url, found.c_url]
        revisit = opened.records[4][1]
        assert revisit.get_header("WARC-Refers-To") == opened.records[1][1].get_header(
            "WARC-Record-ID"
        )
        assert [page["url"] for page in opened.pages] == [found.a_url]

        # The CLI, the whole workspace: every exchange, each group once.
        out = tmp_path / "all.wacz"
        done = cli("--workspace", str(workspace), "--out", str(out))
        assert done.exit_code == 0, done.output
        summary = json.loads(done.stdout)
        assert summary["exchanges"] == 4 and summary["pages"] == 2
        assert summary["bytes"] == out.stat().st_size
        wacz_validate(out)
        every = open_export(out)
        kinds = [kind for kind, _, _ in every.records]
        assert kinds.count("response") == 2 and kinds.count("revisit") == 2
        assert kinds.count("request") == 4 and kinds.count("metadata") == 4
        assert sorted(p["url"] for p in every.pages) == sorted([found.a_url, found.b_url])
        metadata = [p.decode() for k, _, p in every.records if k == "metadata"]
        for name in ("a", "b", "c"):
            assert any(f"evidence-id: {found.evidence_id(name)}" in m for m in metadata), name

        # pywb replays the archived bytes from both packages.
        collection = f"c{uuid.uuid4().hex[:12]}"
        pywb.add_collection(collection, out)
        for url, body in ((found.a_url, found.a_body), (found.b_url, found.b_body)):
            replayed = pywb.replay(collection, timestamp(every, url), url)
            assert replayed.status_code == 200, (replayed.status_code, pywb.output())
            assert replayed.content == body
        collection = f"c{uuid.uuid4().hex[:12]}"
        pywb.add_collection(collection, only_c)
        stamp = next(s for _, s, f in opened.cdxj if f["url"] == found.c_url)
        replayed = pywb.replay(collection, stamp, found.c_url)
        assert replayed.status_code == 200, (replayed.status_code, pywb.output())
        assert replayed.content == found.a_body  # the revisit, resolved to a's payload

    def test_malformed_items_are_all_reported_and_nothing_is_exported(
        self,
        api: Api,
        site: TLSSite,
        workspace: uuid.UUID,
        archive_dir: Path,
        tmp_path: Path,
    ) -> None:
        url = serve(site, Origin(article("Listed lake").encode()))
        mine = completed(api, run(workspace, url))["evidence"]["evidence_id"]
        other_workspace = uuid.uuid4()
        theirs_url = serve(site, Origin(article("Their lake").encode()))
        other = Api(api.client, make_key([other_workspace]))
        theirs = completed(other, run(other_workspace, theirs_url))["evidence"]["evidence_id"]
        base = {"workspace_id": str(workspace)}
        ids: list[Any] = [mine, "not-a-uuid", 7, mine.upper(), f"{{{mine}}}", mine.replace("-", "")]
        error = check_envelope(
            post_export(api, {**base, "evidence_ids": ids}), 400, "invalid_input"
        )
        assert error["field"] == "evidence_ids[1]"
        assert [(i["index"], i["reason"]) for i in error["details"]["items"]] == [
            (1, "not_a_uuid"),
            (2, "not_a_uuid"),
            (3, "duplicate"),
            (4, "not_a_uuid"),
            (5, "not_a_uuid"),
        ]
        # Unknown and another workspace's ids alike: 404, every one named.
        unknown = str(uuid.uuid4())
        body = {**base, "evidence_ids": [mine, theirs, unknown]}
        error = check_envelope(post_export(api, body), 404, "not_found")
        assert error["details"]["items"] == [
            {"index": 1, "value": theirs, "reason": "not_found"},
            {"index": 2, "value": unknown, "reason": "not_found"},
        ]
        # Another workspace (this key has none of it) and a workspace with nothing archived.
        theirs_ws = check_envelope(
            post_export(api, {"workspace_id": str(other_workspace)}), 404, "not_found"
        )
        assert theirs_ws["message"] == "no such workspace"
        empty_workspace = uuid.uuid4()
        empty_key = Api(api.client, make_key([empty_workspace]))
        empty = check_envelope(
            post_export(empty_key, {"workspace_id": str(empty_workspace)}), 404, "not_found"
        )
        assert empty["message"] == "nothing archived for that selection"
        for bad in ({**base, "evidence_ids": []}, {**base, "extra": 1}, {"evidence_ids": [mine]}):
            check_envelope(post_export(api, bad), 400, "invalid_input")
        # The CLI refuses the same items, and leaves nothing at --out.
        out = tmp_path / "refused.wacz"
        args = ["--workspace", str(workspace), "--out", str(out)]
        done = cli(*args, "--evidence", mine, "--evidence", "nope", "--evidence", mine)
        assert done.exit_code == 1
        assert "item 1 'nope': not_a_uuid" in done.stderr
        assert "item 2" in done.stderr and "duplicate" in done.stderr
        done = cli(*args, "--evidence", theirs)
        assert done.exit_code == 1 and "not_found" in done.stderr
        assert not out.exists() and not list(tmp_path.glob("*.partial"))

    def test_an_export_over_the_limit_is_refused(
        self,
        api: Api,
        site: TLSSite,
        workspace: uuid.UUID,
        archive_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path,
    ) -> None:
        """The limit counts every group copied, the responses revisits refer to included; at
        the limit the export is made, one byte over it is 413 export_too_large (the API's and
        the CLI's own `--max-bytes`)."""
        from worker.platform.settings import get_settings

        found = archive_three(api, site, workspace)
        by_type = {(r.evidence_id, r.record_type): r for r in rows(found.retrievals)}
        c = by_type[(uuid.UUID(found.evidence_id("c")), "revisit")]
        a = by_type[(uuid.UUID(found.evidence_id("a")), "response")]
        body = {"workspace_id": str(workspace), "evidence_ids": [found.evidence_id("c")]}
        total = c.group_bytes + a.group_bytes  # c's revisit and the response it refers to
        monkeypatch.setattr(get_settings(), "export_max_bytes", total)
        assert post_export(api, body).status_code == 200  # exactly at the limit
        # Over it by the referred response alone (c's own group is well within it).
        for limit in (total - 1, c.group_bytes):
            monkeypatch.setattr(get_settings(), "export_max_bytes", limit)
            error = check_envelope(post_export(api, body), 413, "invalid_input")
            assert error["details"] == {
                "reason": "export_too_large",
                "selected_bytes": total,
                "max_bytes": limit,
            }
        # The database's sum refuses before any row is loaded.
        monkeypatch.setattr(get_settings(), "export_max_bytes", c.group_bytes - 1)
        error = check_envelope(post_export(api, body), 413, "invalid_input")
        assert error["details"]["selected_bytes"] == c.group_bytes
        out = tmp_path / "limited.wacz"
        args = ["--workspace", str(workspace), "--evidence", found.evidence_id("c")]
        done = cli(*args, "--out", str(out), "--max-bytes", str(total - 1))
        assert done.exit_code == 1 and "over the limit" in done.stderr
        assert not out.exists()
        done = cli(*args, "--out", str(out), "--max-bytes", str(total))
        assert done.exit_code == 0, done.output
        wacz_validate(out)


def test_an_index_that_does_not_fit_the_files_is_refused(
    api: Api, site: TLSSite, workspace: uuid.UUID, archive_dir: Path
) -> None:
    """The group's start is derived from the index and checked against the records: a size or
    offset that does not fit is refused, never copied as a torn or foreign record; an export
    whose files are gone is a 404, not a package cut short."""
    import dataclasses

    from worker.archive import reader
    from worker.store import archive_reads, db

    url = serve(site, Origin(article("Indexed lake").encode()))
    retrieval = completed(api, run(workspace, url))
    evidence_id = uuid.UUID(retrieval["evidence"]["evidence_id"])
    (row,) = db.with_transient_retry(lambda s: archive_reads.revision_exchanges(s, evidence_id, 1))
    span = reader.group_span(archive_dir, row)
    assert span.end - span.start == row.group_bytes
    for wrong in (
        dataclasses.replace(row, group_bytes=row.group_bytes + 1),
        dataclasses.replace(row, group_bytes=row.group_bytes - 1),
        dataclasses.replace(row, offset=row.offset + 1),
        dataclasses.replace(row, length=row.length - 1),
        dataclasses.replace(row, record_id="<urn:uuid:0>"),
        dataclasses.replace(row, file="no-such.warc.gz"),
    ):
        with pytest.raises(reader.ArchiveUnreadable):
            reader.group_span(archive_dir, wrong)
    for path in archive_dir.iterdir():
        path.unlink()
    error = check_envelope(post_export(api, {"workspace_id": str(workspace)}), 404, "not_found")
    assert "no longer readable" in error["message"]


def test_the_body_schema_is_the_contract_file(http: Any) -> None:
    """The document's request body is worker/contract/evidence_export.input.json, and it
    agrees with the API on what is well formed: bodies it accepts pass the schema, the
    malformed ones refused above fail it."""
    from jsonschema import Draft7Validator, FormatChecker

    from worker import contract

    schema = contract.load("evidence_export.input.json")
    Draft7Validator.check_schema(schema)
    document = http.get("/openapi.json").json()
    component = document["components"]["schemas"]["EvidenceExportRequest"]
    assert component == {k: v for k, v in schema.items() if k != "$schema"}
    operation = document["paths"][EXPORTS]["post"]
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/EvidenceExportRequest"
    }
    assert set(operation["responses"]["200"]["content"]) == {"application/wacz"}
    validator = Draft7Validator(schema, format_checker=FormatChecker())
    workspace, item = str(uuid.uuid4()), str(uuid.uuid4())
    for good in ({"workspace_id": workspace}, {"workspace_id": workspace, "evidence_ids": [item]}):
        assert validator.is_valid(good), good
    for bad in (
        {"workspace_id": workspace, "evidence_ids": []},
        {"workspace_id": workspace, "evidence_ids": [item, item]},
        {"workspace_id": workspace, "evidence_ids": [7]},
        {"workspace_id": workspace, "extra": 1},
        {"evidence_ids": [item]},
        {"workspace_id": workspace, "evidence_ids": [item] * 1001},
    ):
        assert not validator.is_valid(bad), bad


def test_read_rules(api: Api, site: TLSSite, workspace: uuid.UUID, archive_dir: Path) -> None:
    """Both routes need a key with the scope, and each call costs a read token of the
    workspace: past its burst, 429 rate_limited with Retry-After, as every read."""
    from api.services import admission as quotas
    from worker.domain import clock
    from worker.lanes import quota_overrides as quota_store
    from worker.store import db

    url = serve(site, Origin(article("Rated lake").encode()))
    evidence_id = completed(api, run(workspace, url))["evidence"]["evidence_id"]
    body = {"workspace_id": str(workspace)}
    scopeless = Api(api.client, make_key([workspace], scopes=("other:scope",)))
    check_envelope(get(scopeless, raw_path(evidence_id)), 403, "not_entitled")
    check_envelope(post_export(scopeless, body), 403, "not_entitled")
    check_envelope(api.client.get(raw_path(evidence_id)), 401, "not_entitled")
    check_envelope(api.client.post(EXPORTS, json=body), 401, "not_entitled")
    override = quota_store.Override(workspace, None, None, None, read_rate=0.01, read_burst=2)
    db.with_transient_retry(lambda s: quota_store.set_override(s, override, clock.now()))
    quotas.overrides.clear()
    try:
        assert get(api, raw_path(evidence_id)).status_code == 200
        assert post_export(api, body).status_code == 200
        for refused in (get(api, raw_path(evidence_id)), post_export(api, body)):
            error = check_envelope(refused, 429, "rate_limited")
            assert refused.headers["Retry-After"] == str(error["details"]["retry_after_seconds"])
    finally:
        db.with_transient_retry(lambda s: quota_store.clear_override(s, workspace))
        quotas.overrides.clear()


def test_a_large_body_is_streamed_in_bounded_chunks(
    api: Api, site: TLSSite, workspace: uuid.UUID, archive_dir: Path
) -> None:
    """The payload is read from the WARC file a chunk at a time, never whole."""
    from worker.archive import reader
    from worker.store import archive_reads, db

    filler = ("<!-- " + uuid.uuid4().hex * 40 + " -->\n") * 800  # about 1 MB
    body = article("Large lake").replace("</body>", filler + "</body>").encode()
    url = serve(site, Origin(body))
    evidence_id = completed(api, run(workspace, url))["evidence"]["evidence_id"]
    response = get(api, raw_path(evidence_id))
    assert response.status_code == 200 and response.content == body
    (row,) = db.with_transient_retry(
        lambda s: archive_reads.revision_exchanges(s, uuid.UUID(evidence_id), 1)
    )
    with reader.open_payload(archive_dir, row) as payload:
        sizes = [len(chunk) for chunk in payload.chunks()]
    assert sum(sizes) == len(body)
    assert max(sizes) <= reader.CHUNK and len(sizes) >= len(body) // reader.CHUNK


def test_exports_at_once_are_bounded(
    api: Api, site: TLSSite, workspace: uuid.UUID, archive_dir: Path
) -> None:
    """While the process writes as many exports as it may, another is 429 rate_limited with
    Retry-After at once, and no temporary file is left; once a slot is free, it is made."""
    import tempfile

    from api.services import evidence_archive

    url = serve(site, Origin(article("Busy lake").encode()))
    completed(api, run(workspace, url))
    body = {"workspace_id": str(workspace)}
    before = set(Path(tempfile.gettempdir()).glob("export-*.wacz"))
    with contextlib.ExitStack() as held:
        for _ in range(evidence_archive.EXPORTS_AT_ONCE):
            held.enter_context(evidence_archive.export_slot())
        refused = post_export(api, body)
        error = check_envelope(refused, 429, "rate_limited")
        seconds = evidence_archive.EXPORT_RETRY_AFTER_SECONDS
        assert refused.headers["Retry-After"] == str(seconds)
        assert error["details"]["retry_after_seconds"] == seconds
    assert set(Path(tempfile.gettempdir()).glob("export-*.wacz")) == before
    assert post_export(api, body).status_code == 200
    assert set(Path(tempfile.gettempdir()).glob("export-*.wacz")) == before  # deleted once sent
