"""Every bound and reason of the fetch guard, proven through the real Celery worker.

Each case is a hostile route on the loopback site; all are submitted at once, then each must
settle with its status and reason within the task's soft time limit, and the worker's memory
must stay bounded while it digests a 1 GiB decompression bomb.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import hostile
from tests.support.factories import Api, body, make_key
from tests.support.pages import article
from tests.support.slowdown import scaled
from tests.support.tls_site import Page, TLSSite

pytestmark = [pytest.mark.usefixtures("services")]

P = "/gw"
ARTICLE = Page(article("A guarded article").encode())


@dataclass(frozen=True)
class Case:
    """A hostile route and the outcome it must settle with."""

    id: str
    path: str
    status: str
    reason: str | None


def _mount(site: TLSSite) -> list[Case]:
    """Serve every hostile route; return the cases that use them."""
    site.add(f"{P}/401", Page(b"no", "text/plain", 401))
    site.add(f"{P}/403", Page(b"no", "text/plain", 403))
    site.add(f"{P}/410", Page(b"gone", "text/plain", 410))
    site.add(f"{P}/500", Page(b"oops", "text/plain", 500))
    site.add(f"{P}/503", Page(b"busy", "text/plain", 503))
    # The slow servers outlast the fetch deadline (scaled alike) about three times over: 39
    # drips of 64 bytes, a silence of 20 s, on a quiet machine.
    drip = scaled(0.5)
    site.add(f"{P}/drip", hostile.trickle(article("Dripping").encode(), interval=drip, step=64))
    site.add(f"{P}/stall", hostile.stall(before_headers=True, seconds=scaled(20)))
    site.add(f"{P}/stall-body", hostile.stall(before_headers=False, seconds=scaled(20)))
    site.add(f"{P}/endless", hostile.endless_chunked())
    site.add(f"{P}/huge-headers", hostile.huge_headers())
    site.add(f"{P}/png-as-html", hostile.binary_as("png"))
    site.add(f"{P}/pdf", Page(hostile.BINARY_SAMPLES["pdf"], "application/pdf"))
    site.add(f"{P}/image", Page(hostile.BINARY_SAMPLES["png"], "image/png"))
    site.add(f"{P}/deflate-bomb", hostile.compression_bomb("deflate", 256 * 1024 * 1024))
    five = hostile.redirect_chain(site, f"{P}/five", 5, ARTICLE)
    six = hostile.redirect_chain(site, f"{P}/six", 6, ARTICLE)
    loop = hostile.redirect_loop(site, f"{P}/loop")
    site.add(f"{P}/to-http", hostile.redirect(f"http://127.0.0.1:{site.port}/"))
    site.add(f"{P}/to-metadata", hostile.redirect(_metadata_url(site)))
    site.add(f"{P}/to-port", hostile.redirect("https://127.0.0.1:1/"))
    return [
        Case("401-access-denied", f"{P}/401", "blocked", "access_denied"),
        Case("403-access-denied", f"{P}/403", "blocked", "access_denied"),
        Case("410-not-found", f"{P}/410", "unavailable", "not_found"),
        Case("500-unavailable", f"{P}/500", "unavailable", "unavailable"),
        Case("503-unavailable", f"{P}/503", "unavailable", "unavailable"),
        Case("drip-feed-timeout", f"{P}/drip", "unavailable", "timeout"),
        Case("silent-server-timeout", f"{P}/stall", "unavailable", "timeout"),
        Case("stalled-body-timeout", f"{P}/stall-body", "unavailable", "timeout"),
        Case("endless-chunked-bounded", f"{P}/endless", "partial", "response_too_large"),
        Case("huge-headers", f"{P}/huge-headers", "unavailable", "unavailable"),
        Case("binary-as-html", f"{P}/png-as-html", "unsupported", "unsupported_media"),
        Case("pdf-unsupported-media", f"{P}/pdf", "unsupported", "unsupported_media"),
        Case("image-unsupported-media", f"{P}/image", "unsupported", "unsupported_media"),
        Case("deflate-bomb-bounded", f"{P}/deflate-bomb", "partial", "response_too_large"),
        Case("five-redirects-followed", five, "ready", None),
        Case("six-redirects-refused", six, "unavailable", "unavailable"),
        Case("redirect-loop-refused", loop, "unavailable", "unavailable"),
        Case("redirect-to-http-unsafe", f"{P}/to-http", "blocked", "unsafe_url"),
        Case("redirect-to-metadata-unsafe", f"{P}/to-metadata", "blocked", "unsafe_url"),
        Case("redirect-to-other-port-unsafe", f"{P}/to-port", "blocked", "unsafe_url"),
    ]


def _metadata_url(site: TLSSite) -> str:
    """The cloud metadata service on a port the worker may dial (the site's own), so the port
    rule lets it through and only the address rule can refuse it."""
    return f"https://169.254.169.254:{site.port}/latest/meta-data/"


def _url(site: TLSSite, path: str) -> str:
    return path if path.startswith("https://") else site.url(path)


@pytest.fixture(scope="module")
def outcomes(http: object, site: TLSSite) -> dict[str, tuple[Case, dict[str, Any], float]]:
    """Submit every case at once; wait for each; keep (case, retrieval, seconds to settle)."""
    workspace = uuid.uuid4()
    api = Api(http, make_key([workspace]))
    cases = _mount(site)
    started = time.monotonic()
    ids = {
        c.id: api.post(body(_url(site, c.path), workspace)).json()["retrieval"]["id"] for c in cases
    }
    settled: dict[str, tuple[Case, dict[str, Any], float]] = {}
    for case in cases:
        retrieval = api.wait(ids[case.id], timeout=90)
        settled[case.id] = (case, retrieval, time.monotonic() - started)
    return settled


CASE_IDS = [
    "401-access-denied", "403-access-denied", "410-not-found", "500-unavailable",
    "503-unavailable", "drip-feed-timeout", "silent-server-timeout", "stalled-body-timeout",
    "endless-chunked-bounded", "huge-headers", "binary-as-html", "pdf-unsupported-media",
    "image-unsupported-media", "deflate-bomb-bounded", "five-redirects-followed",
    "six-redirects-refused", "redirect-loop-refused", "redirect-to-http-unsafe",
    "redirect-to-metadata-unsafe", "redirect-to-other-port-unsafe",
]  # fmt: skip


class TestGuardOutcomes:
    """Each hostile response settles with the contract's status and reason."""

    @pytest.mark.parametrize("case_id", CASE_IDS)
    def test_outcome(
        self, outcomes: dict[str, tuple[Case, dict[str, Any], float]], case_id: str
    ) -> None:
        """The retrieval completes with the expected status and reason, and no runaway text."""
        case, retrieval, _ = outcomes[case_id]
        assert retrieval["state"] == "completed", retrieval
        result = retrieval["result"]
        assert (result["status"], result["reason"]) == (case.status, case.reason), result
        assert len(result["text"]) <= 20_000
        if case.status in ("blocked", "unsupported", "unavailable"):
            assert result["text"] == "" and retrieval["evidence"] is None

    def test_metadata_redirect_refused_by_the_address_rule(
        self,
        outcomes: dict[str, tuple[Case, dict[str, Any], float]],
        services: object,
        site: TLSSite,
    ) -> None:
        """The redirect to the metadata service passes the URL checks (scheme, port, host form);
        the worker logs that the metadata address rule refused it, for that retrieval."""
        from worker.fetch.guard import ParsedTarget, check_url
        from worker.platform.settings import get_settings

        target = check_url(_metadata_url(site), get_settings().fetch_allowed_ports)
        assert isinstance(target, ParsedTarget), target
        _, retrieval, _ = outcomes["redirect-to-metadata-unsafe"]
        refusals = [
            record
            for record in _log_records(services.worker.log())  # type: ignore[attr-defined]
            if record.get("retrieval_id") == retrieval["id"]
            and record.get("event") == "egress_refused"
        ]
        assert [r["rule"] for r in refusals] == ["169.254.169.254 is cloud metadata"], refusals

    @pytest.mark.parametrize("path", ["/drip", "/stall", "/stall-body"])
    def test_slow_servers_end_at_the_fetch_deadline(
        self,
        outcomes: dict[str, tuple[Case, dict[str, Any], float]],
        http: object,
        site: TLSSite,
        path: str,
    ) -> None:
        """Alone on the worker, a slow server ends at the fetch's own bound, not the task's."""
        from datetime import datetime

        from worker.platform.settings import get_settings

        settings = get_settings()
        assert outcomes  # the routes are mounted
        workspace = uuid.uuid4()
        api = Api(http, make_key([workspace]))
        done = api.wait(api.post(body(site.url(P + path), workspace)).json()["retrieval"]["id"])
        assert done["result"]["reason"] == "timeout"
        created = datetime.fromisoformat(done["created_at"].replace("Z", "+00:00"))
        settled = datetime.fromisoformat(done["settled_at"].replace("Z", "+00:00"))
        took = (settled - created).total_seconds()
        # The fetch's total deadline plus queueing and extraction slack, and below the soft
        # limit: had the fetch not stopped itself, the task limit would have (later). Every
        # term is scaled to the machine alike, so this compares bounds, not speed.
        slack = scaled(2)
        assert took < settings.fetch_total_timeout_seconds + slack < settings.soft_time_limit, took


class TestOriginPolicies:
    """robots.txt and an unreachable origin, through the worker."""

    def test_robots_disallowed_path_is_access_denied(self, http: object, env: object) -> None:
        """A path robots.txt disallows is blocked/access_denied; an allowed one is fetched."""
        site: TLSSite = env.robots_site  # type: ignore[attr-defined]
        workspace = uuid.uuid4()
        api = Api(http, make_key([workspace]))
        private = site.page("/private/report", article("Private"))
        public = site.page("/public/report", article("Public"))
        denied = api.wait(api.post(body(private, workspace)).json()["retrieval"]["id"])
        allowed = api.wait(api.post(body(public, workspace)).json()["retrieval"]["id"])
        assert (denied["result"]["status"], denied["result"]["reason"]) == (
            "blocked",
            "access_denied",
        )
        assert site.hits.get("/private/report", 0) == 0
        assert site.hits.get("/robots.txt", 0) >= 1
        assert allowed["result"]["status"] == "ready"

    def test_refused_connection_is_egress_unavailable(self, http: object, env: object) -> None:
        """An allowed port where nothing listens is unavailable/egress_unavailable."""
        workspace = uuid.uuid4()
        api = Api(http, make_key([workspace]))
        url = f"https://127.0.0.1:{env.closed_port}/page"  # type: ignore[attr-defined]
        done = api.wait(api.post(body(url, workspace)).json()["retrieval"]["id"])
        assert (done["result"]["status"], done["result"]["reason"]) == (
            "unavailable",
            "egress_unavailable",
        )
        assert done["evidence"] is None


class TestWorkerMemory:
    """Decompression bombs stop at the byte bound inside the worker, not at the machine's."""

    def test_brotli_bomb_keeps_worker_memory_bounded(
        self, http: object, site: TLSSite, services: object
    ) -> None:
        """A 1 GiB brotli bomb settles response_too_large; no worker process peaks past 400 MiB."""
        workspace = uuid.uuid4()
        api = Api(http, make_key([workspace]))
        url = site.add(f"{P}/br-bomb", hostile.compression_bomb("br", 1024 * 1024 * 1024))
        done = api.wait(api.post(body(url, workspace)).json()["retrieval"]["id"], timeout=60)
        assert done["result"]["reason"] == "response_too_large"
        peaks = [_peak_rss_mib(pid) for pid in services.worker.children()]  # type: ignore[attr-defined]
        assert peaks and max(peaks) < 400, peaks


def _log_records(log: str) -> list[dict[str, Any]]:
    """The JSON records of a worker's log (its banner and any torn line are skipped)."""
    records = []
    for line in log.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for {pid}")
