"""`evidence api --workers N`: every worker process logs as configured (JSON, level, redaction),
and /metrics counts what all of them answered."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx

from tests.conftest import Env
from tests.support.services import Process, free_port, wait_for


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def serve_and_log(
    env: Env, level: str, requests: int = 8, scrapes: list[str] | None = None
) -> list[str]:
    """Run `evidence api --workers 2`, send unauthenticated GETs, return its log's lines (and
    append to `scrapes` what /metrics answered, a few times, after them)."""
    port = free_port()
    log = Path(env.tmp) / f"api-workers-{port}.log"
    process = Process(
        ["api", "--port", str(port), "--workers", "2"],
        log,
        env={"EVIDENCE_LOG_LEVEL": level, "EVIDENCE_LOG_JSON": "true"},
    ).start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(url), timeout=60, interval=0.2)
        for _ in range(requests):  # a fresh connection each: both worker processes answer some
            answer = httpx.get(f"{url}/research-api/evidence/retrievals/{uuid.uuid4()}")
            assert answer.status_code == 401
        for _ in range(4 if scrapes is not None else 0):  # fresh connections: either process
            scrapes.append(httpx.get(f"{url}/metrics").text)  # type: ignore[union-attr]
    finally:
        process.stop()
    return log.read_text(errors="replace").splitlines()


class TestWorkerProcessLogging:
    def test_request_lines_are_json(self, env: Env) -> None:
        """At INFO, each request is one JSON line, whichever worker process answered it."""
        lines = serve_and_log(env, "INFO")
        requests = [line for line in lines if "request" in line and "duration_ms" in line]
        assert len(requests) == 8, lines[-20:]
        records = [json.loads(line) for line in requests]
        assert {r["event"] for r in records} == {"request"}
        assert {r["status"] for r in records} == {401}

    def test_level_is_honoured(self, env: Env) -> None:
        """At WARNING, the worker processes write no request lines."""
        lines = serve_and_log(env, "WARNING")
        assert not [line for line in lines if "duration_ms" in line], lines[-20:]


class TestWorkerProcessMetrics:
    def test_metrics_count_every_process(self, env: Env) -> None:
        """Without PROMETHEUS_MULTIPROC_DIR, `--workers 2` shares one of its own: whichever
        process answers the scrape counts the 401s both processes answered."""
        import os

        assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ
        scrapes: list[str] = []
        serve_and_log(env, "WARNING", requests=12, scrapes=scrapes)
        route = 'route="/research-api/evidence/retrievals/{retrieval_id}"'
        for text in scrapes:
            counted = [
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("evidence_http_requests_total") and route in line
                and 'code="401"' in line
            ]  # fmt: skip
            assert sum(counted) == 12, text[-2000:]
