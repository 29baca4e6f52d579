"""Image-byte fetches never hold the API's request threads, and each key has only a few at once.

An origin that drips its image a byte at a time holds each fetch until its deadline. While one
key's fetches hang there, /healthz and another workspace's reads keep their usual latency, and
that key's fetches past EVIDENCE_IMAGE_FETCH_PER_KEY are refused at once with 429.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest

from tests.conftest import Env
from tests.read.test_read_e2e import story
from tests.support.factories import Api, body, check_envelope, make_key
from tests.support.read_client import ReadApi
from tests.support.read_schemas import validate_get_image
from tests.support.served import served_api
from tests.support.services import wait_for
from tests.support.slowdown import scaled
from tests.support.tls_site import TLSSite

pytestmark = pytest.mark.usefixtures("services")

PNG = (Path(__file__).resolve().parents[1] / "fixtures" / "images" / "python.png").read_bytes()
PER_KEY = 2
#: Calls key A makes at once: as many as the API has request threads.
CALLS = 8
#: 6 s on a quiet machine, stretched on a busy one (a whole number: it is the Retry-After).
IMAGE_TIMEOUT = round(scaled(6))
#: What another request may take while A's fetches hang (the bug made it wait for them): well
#: below IMAGE_TIMEOUT, which the bug made them wait.
USUAL = IMAGE_TIMEOUT * 2 / 3


def drip(handler: BaseHTTPRequestHandler) -> None:
    """A PNG announced whole, then sent one byte every half second."""
    handler.send_response(200)
    handler.send_header("Content-Type", "image/png")
    handler.send_header("Content-Length", str(len(PNG)))
    handler.end_headers()
    for byte in PNG[:120]:
        try:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
        except OSError:
            return
        time.sleep(0.5)


@pytest.fixture(scope="module")
def slow_origin(env: Env) -> Iterator[TLSSite]:
    """An HTTPS origin of its own (its own politeness slots), trusted like the test site."""
    with TLSSite(ca=env.site.ca) as origin:
        origin.add("/drip.png", drip)
        yield origin


@pytest.fixture(scope="module")
def api_url(env: Env, slow_origin: TLSSite) -> Iterator[str]:
    ports = f"{os.environ['EVIDENCE_FETCH_ALLOWED_PORTS']},{slow_origin.port}"
    settings = {
        "EVIDENCE_FETCH_ALLOWED_PORTS": ports,
        "EVIDENCE_IMAGE_FETCH_PER_KEY": str(PER_KEY),
        "EVIDENCE_IMAGE_FETCH_TIMEOUT_SECONDS": str(IMAGE_TIMEOUT),
        # Retrievals keep a long deadline: image bytes must not be bounded by it.
        "EVIDENCE_FETCH_TOTAL_TIMEOUT_SECONDS": "30",
    }
    # The per-key bound is each process's own: one process, so every call meets the same one.
    with served_api(env.tmp / "api-image-bounds.log", settings, workers=1) as url:
        yield url


def test_hanging_image_fetches_do_not_stall_others(
    api_url: str,
    api: Api,
    http: object,
    site: TLSSite,
    slow_origin: TLSSite,
    workspace: uuid.UUID,
) -> None:
    """Key A's calls: PER_KEY hang until the deadline, the rest get 429; others stay quick."""
    marker = "drip" + uuid.uuid4().hex[:8]
    image_url = slow_origin.url("/drip.png")
    figure = f'<figure><img src="{image_url}" alt="{marker}"><figcaption>{marker}</figcaption>'
    page = site.page(f"/limits/{marker}", story(marker, extra=figure + "</figure>"))
    read = ReadApi(api)
    read.retrieve(page, workspace)
    found = read.ok("images/search", {"workspace_id": str(workspace), "query": marker})
    image_id = found["result"]["images"][0]["image_id"]

    other_ws = uuid.uuid4()
    other = Api(http, make_key([other_ws]))
    other_id = other.post(body(site.page(f"/limits/{marker}/b", story(marker)), other_ws))
    other_path = f"/research-api/evidence/retrievals/{other_id.json()['retrieval']['id']}"

    def get_bytes() -> tuple[httpx.Response, float]:
        start = time.monotonic()
        response = httpx.post(
            f"{api_url}/research-api/images/get",
            json={"image_id": image_id, "include_bytes": True},
            headers=api.headers,
            timeout=60,
        )
        return response, time.monotonic() - start

    def timed(path: str, headers: dict[str, str] | None = None) -> float:
        start = time.monotonic()
        response = httpx.get(f"{api_url}{path}", headers=headers, timeout=60)
        assert response.status_code == 200, response.text
        return time.monotonic() - start

    hits_before = slow_origin.hits.get("/drip.png", 0)
    with ThreadPoolExecutor(CALLS) as pool:
        calls = [pool.submit(get_bytes) for _ in range(CALLS)]
        wait_for(lambda: slow_origin.hits.get("/drip.png", 0) - hits_before >= PER_KEY, 10)
        waits: list[float] = []
        for _ in range(5):
            waits.append(timed("/healthz"))
            waits.append(timed(other_path, other.headers))
            time.sleep(0.3)
        answers = [call.result() for call in calls]

    assert max(waits) < USUAL, waits
    assert slow_origin.hits.get("/drip.png", 0) - hits_before == PER_KEY
    refused = [(r, s) for r, s in answers if r.status_code == 429]
    assert len(refused) == CALLS - PER_KEY, [r.status_code for r, _ in answers]
    for response, seconds in refused:
        assert seconds < USUAL, seconds
        error = check_envelope(response, 429, "upstream_unavailable")
        assert error["details"] == {"reason": "rate_limited", "retry_after_seconds": IMAGE_TIMEOUT}
        assert response.headers["retry-after"] == str(IMAGE_TIMEOUT)
        validate_get_image(response.json())
    hung = [(r, s) for r, s in answers if r.status_code != 429]
    for response, seconds in hung:
        error = check_envelope(response, 503, "upstream_unavailable")
        assert error["details"] == {"reason": "timeout"}
        assert IMAGE_TIMEOUT - 1 < seconds < IMAGE_TIMEOUT + scaled(5), seconds

    # The key's slots are free again once its fetches ended.
    again = threading.Thread(target=get_bytes)
    again.start()
    wait_for(lambda: slow_origin.hits.get("/drip.png", 0) - hits_before > PER_KEY, 10)
    again.join(IMAGE_TIMEOUT + 10)
