"""`evidence api --workers N`: every worker process logs as configured (JSON, level, redaction)."""

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


def serve_and_log(env: Env, level: str, requests: int = 8) -> list[str]:
    """Run `evidence api --workers 2`, send unauthenticated GETs, return its log's lines."""
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
