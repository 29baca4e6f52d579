"""Request bodies over EVIDENCE_MAX_BODY_BYTES are refused early, declared or streamed, with 413;
the largest legitimate body (a brief at every length limit) still goes through."""

from __future__ import annotations

import json
import select
import socket
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from api.serving.body_limit import declared_length
from tests.conftest import Env
from tests.read.test_read_e2e import story
from tests.support.factories import Api, check_envelope, make_key
from tests.support.read_client import ReadApi
from tests.support.read_schemas import validate_brief
from tests.support.served import json_of, port_of, raw_request, read_until_closed, served_api
from tests.support.tls_site import TLSSite
from worker.platform.settings import Settings

MAX_SAFE_INTEGER = 9_007_199_254_740_991
#: A BMP letter outside ASCII: Python's json.dumps (ensure_ascii) writes each as six bytes.
WIDE = "é"


def largest_brief(evidence_id: str, revision: int, text: str = WIDE) -> dict[str, object]:
    """A brief revision with every list and string at its schema's length limit."""
    finding = {
        "id": str(uuid.uuid4()),
        "statement": text * 4_000,
        "basis": "generated",
        "evidence": [{"evidence_id": evidence_id, "revision": revision}] * 500,
        "uncertainty": text * 1_000,
    }
    return {
        "title": text * 200,
        "question": text * 2_000,
        "summary": text * 10_000,
        "findings": [finding] * 100,
        "angles": [text * 2_000] * 30,
        "notes": text * 10_000,
        "project_id": str(uuid.uuid4()),
        "project_revision": MAX_SAFE_INTEGER,
        "corpus_snapshot_id": str(uuid.uuid4()),
        "language": "a" * 35,
    }


def test_declared_length() -> None:
    """Content-Length is read only when it is a plain number."""
    scope = {"type": "http", "headers": [(b"content-length", b"52428800")]}
    assert declared_length(scope) == 52_428_800
    assert declared_length({"type": "http", "headers": []}) is None
    assert declared_length({"type": "http", "headers": [(b"content-length", b"-1")]}) is None


def test_default_fits_the_largest_legitimate_body() -> None:
    """The default limit fits a maximal brief revision, JSON-escaped as Python writes it."""
    body = {
        "workspace_id": str(uuid.uuid4()),
        "id": str(uuid.uuid4()),
        "expected_revision": MAX_SAFE_INTEGER,
        "content": largest_brief(str(uuid.uuid4()), MAX_SAFE_INTEGER),
    }
    size = len(json.dumps(body).encode())
    default = Settings.model_fields["max_body_bytes"].default
    assert 7_500_000 < size <= default, (size, default)
    batch = [
        {
            "url": "https://example.org/" + "a" * 2028,
            "kind": "published_captions",
            "language": "a" * 35,
            "workspace_id": str(uuid.uuid4()),
            "mutation_id": str(uuid.uuid4()),
        }
    ] * 1_000
    assert len(json.dumps(batch).encode()) < size


@pytest.fixture(scope="module")
def api_url(env: Env) -> Iterator[str]:
    with served_api(env.tmp / "api-body-limit.log") as url:
        yield url


def _post_head(path: str, extra: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{extra}\r\n"
    ).encode()


class TestOversize:
    def test_declared_oversize_is_refused_at_once(self, api_url: str) -> None:
        """Content-Length: 50 MB and no body: a quick 413 in the envelope, connection closed.

        No key is sent: the size is refused before any authentication work.
        """
        head = _post_head("/research-api/briefs/create", "Content-Length: 52428800\r\n")
        answer, seconds = raw_request(port_of(api_url), head, timeout=10)
        assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
        assert seconds < 2, seconds
        error = json_of(answer)["error"]  # type: ignore[index]
        assert error["code"] == "invalid_input"
        assert error["details"] == {"max_body_bytes": Settings().max_body_bytes}

    def test_streamed_oversize_is_refused_while_it_streams(self, api_url: str) -> None:
        """A chunked body is counted as it arrives and refused once past the limit.

        With a key (a keyless one is answered 401 before its body is read), to a route whose
        own bound is the whole limit.
        """
        limit = Settings().max_body_bytes
        key = make_key([uuid.uuid4()])
        chunk = b"1," * 32_768
        frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        sent = 0
        with socket.create_connection(("127.0.0.1", port_of(api_url)), timeout=10) as sock:
            extra = f"Transfer-Encoding: chunked\r\nAuthorization: Bearer {key}\r\n"
            head = _post_head("/research-api/briefs/create", extra)
            sock.sendall(head)
            sock.sendall(b"1\r\n[\r\n")
            while sent < 4 * limit:
                if select.select([sock], [], [], 0)[0]:
                    break  # the server has answered
                try:
                    sock.sendall(frame)
                except (BrokenPipeError, ConnectionResetError):
                    break
                sent += len(chunk)
            answer = read_until_closed(sock, timeout=10)
        assert answer.startswith(b"HTTP/1.1 413 "), (sent, answer[:200])
        assert limit <= sent < 2 * limit, sent
        assert json_of(answer)["error"]["code"] == "invalid_input"  # type: ignore[index]

    def test_small_bodies_pass(self, api_url: str) -> None:
        """Below the limit nothing changes: an ordinary body reaches authentication (401)."""
        response = httpx.post(
            f"{api_url}/research-api/evidence/retrieve", json={"url": "https://a.test/"}
        )
        check_envelope(response, 401, "not_entitled")


@pytest.mark.usefixtures("services")
def test_largest_brief_is_accepted(
    api_url: str, api: Api, site: TLSSite, workspace: uuid.UUID
) -> None:
    """A brief at every length limit, 100 findings × 500 citations, is stored and answered."""
    marker = "bodylimit" + uuid.uuid4().hex[:8]
    done = ReadApi(api).retrieve(site.page(f"/limits/{marker}", story(marker)), workspace)
    evidence = done["evidence"]
    content = largest_brief(evidence["evidence_id"], evidence["revision"])
    data = json.dumps({"workspace_id": str(workspace), "content": content}).encode()
    assert len(data) > 7_000_000
    start = time.monotonic()
    response = httpx.post(
        f"{api_url}/research-api/briefs/create",
        content=data,
        headers={**api.headers, "Content-Type": "application/json"},
        timeout=120,
    )
    assert response.status_code == 200, (response.status_code, response.text[:500])
    brief = response.json()
    validate_brief(brief)
    findings = brief["brief"]["content"]["findings"]
    assert len(findings) == 100 and {len(f["evidence"]) for f in findings} == {500}
    assert findings[0]["statement"] == WIDE * 4_000
    print(f"largest brief: {len(data)} bytes stored in {time.monotonic() - start:.1f} s")
