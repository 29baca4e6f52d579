"""Schemathesis, with every check, against a served API: what /openapi.json says is what it does.

The API runs as operators run it (`evidence api`), on a database and a Redis of its own: no
worker consumes its queue, so the URLs schemathesis makes up are never fetched, and the session's
sweeper never sees its retrievals. The key is real, for the workspace of the contract's examples;
most generated bodies name that workspace, so they reach the searches, the brief store and the
retrieval store instead of stopping at 403.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session

from tests.conftest import Env
from tests.support.databases import fresh_database
from tests.support.services import Process, RedisServer, free_port, wait_for

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
#: The workspace of worker/contract/*.example_call.json.
WORKSPACE = uuid.UUID("11111111-1111-4111-8111-111111111111")
#: Test cases per operation and phase, and the seed: bounded and repeatable (about 30-50 s here).
MAX_EXAMPLES = 12
SEED = 20261201
CONFIG = f"""
[dictionaries.workspaces]
values = ["{WORKSPACE}"]

[parameters]
"body.workspace_id" = {{ dictionary = "workspaces", probability = 0.8 }}

# The contract makes a finding that cites evidence the workspace does not hold a 400 naming the
# field, though the body is schema-valid: schemathesis's default would call that a rejection of
# valid data. Only these two routes take citations, so only they may answer it.
[[operations]]
include-path = ["/research-api/briefs/create", "/research-api/briefs/revise"]
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "400", "401", "403", "404", "409", "429"
]

# A webhook URL must also be public HTTPS on an allowed port with a valid public host name, which
# no JSON Schema can say: a schema-valid `https://` is a 400 naming `url`. A workspace holds at
# most EVIDENCE_WEBHOOK_MAX_ENDPOINTS endpoints (409 beyond).
[[operations]]
include-path-regex = "^/research-api/webhooks"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409"]

# A watch URL must also read as a URL with a host by the WHATWG URL Standard, which a pattern
# cannot say; a workspace holds at most EVIDENCE_WATCH_LIMIT_PER_WORKSPACE watches (409 beyond).
[[operations]]
include-path-regex = "^/research-api/watches"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409"]

# Memento: the original URL is the rest of the path, which must also read as an http(s) URL
# with a host (a 400 naming `url` otherwise); one with no evidence in the workspace is a 404.
[[operations]]
include-path-regex = "^/research-api/evidence/memento/"
checks.positive_data_acceptance.expected-statuses = ["2xx", "302", "400", "401", "403", "404"]
"""


def _create_key(url: str) -> str:
    from api.auth import create_key
    from worker.domain import clock
    from worker.store import db

    engine = db.make_engine(url)
    try:
        with Session(engine) as session, session.begin():
            return create_key(session, [WORKSPACE], ["agent:research"], clock.now())
    finally:
        engine.dispose()


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def served(env: Env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base URL, key) of an `evidence api` on a fresh database and a private Redis."""
    from worker.store.migrate import upgrade

    tmp = tmp_path_factory.mktemp("schemathesis")
    redis = RedisServer(tmp).start()
    with fresh_database(env.db_kind, tmp) as database_url:
        upgrade(database_url)
        key = _create_key(database_url)
        port = free_port()
        process = Process(
            ["api", "--port", str(port)],
            tmp / "api.log",
            env={
                "EVIDENCE_DATABASE_URL": database_url,
                "EVIDENCE_BROKER_URL": redis.url,
                "EVIDENCE_LOG_LEVEL": "WARNING",
            },
        ).start()
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: _up(url), timeout=30, interval=0.2)
            yield url, key
        finally:
            process.stop()
            redis.stop()


def test_schemathesis_finds_nothing(served: tuple[str, str], tmp_path: Path) -> None:
    """`schemathesis run --checks all`: every phase, every operation, no failure, no error."""
    url, key = served
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG, encoding="utf-8")
    command = [
        str(SCHEMATHESIS),
        "--config-file",
        str(config),
        "--no-color",
        "run",
        f"{url}/openapi.json",
        "--checks",
        "all",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--header",
        f"Authorization: Bearer {key}",
        "--request-timeout",
        "10",
    ]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=170, check=False
    )  # in tmp_path: it keeps a cache folder where it runs
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-20_000:]
    # Every documented operation was exercised, none skipped for a schema it could not use.
    paths = httpx.get(f"{url}/openapi.json", timeout=10).json()["paths"]
    operations = sum(len(item) for item in paths.values())
    assert f"Tested: {operations}" in output, output[-5_000:]
