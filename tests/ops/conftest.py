"""Operations tests: a real `evidence api` process over HTTP, beside the session worker and beat."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Env, Services
from tests.support.factories import make_key
from tests.support.pages import article
from tests.support.services import Process, RedisServer, free_port, wait_for
from tests.support.tls_site import TLSSite

Labels = frozenset[tuple[str, str]]
#: The virtualenv's scripts (`evidence`, `honcho`), as `make run` puts them on PATH.
BIN = Path(sys.executable).parent


@dataclass
class LiveApi:
    """An `evidence api` subprocess: its base URL and its log file."""

    url: str
    process: Process

    def log(self) -> str:
        return self.process.log()


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="package")
def live_api(env: Env, services: Services) -> Iterator[LiveApi]:
    """The API as operators run it (`evidence api --port P`), metrics read fresh on each scrape."""
    port = free_port()
    process = Process(
        ["api", "--port", str(port)],
        env.tmp / f"api-{port}.log",
        env={"EVIDENCE_METRICS_CACHE_SECONDS": "0"},
    ).start()
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _up(url), timeout=30, interval=0.2)
    yield LiveApi(url, process)
    process.stop()


@pytest.fixture
def tenant() -> tuple[uuid.UUID, str]:
    """A fresh workspace and a real key for it."""
    workspace = uuid.uuid4()
    return workspace, make_key([workspace])


@pytest.fixture
def pages(site: TLSSite) -> list[str]:
    """Three fresh article URLs on the loopback site, each with its own marker word."""
    urls = []
    for _ in range(3):
        path = f"/ops/{uuid.uuid4().hex}"
        urls.append(site.page(path, article("Lakes at dawn", marker=f"marker{path[5:]}")))
    return urls


def scrape(url: str, auth: tuple[str, str] | None = None) -> dict[tuple[str, Labels], float]:
    """Read a Prometheus text endpoint into {(sample name, labels): value}."""
    response = httpx.get(url, auth=auth, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[tuple[str, Labels], float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: dict[tuple[str, Labels], float], name: str, **labels: str) -> float:
    """Sum the samples called `name` whose labels include `labels` (0 when none)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def tmp_file(directory: Path, name: str, lines: list[str]) -> Path:
    """Write `lines` to a file and return its path."""
    path = directory / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def marked(marker: str) -> list[int]:
    """Pids of the processes whose environment holds `marker` (NAME=value)."""
    wanted = marker.encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        if wanted in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


@dataclass
class Stack:
    """A whole local run of its own: its environment, and the marker its processes carry."""

    env: dict[str, str]
    marker: str

    def processes(self) -> list[int]:
        return marked(self.marker)


@pytest.fixture
def stack(env: Env, tmp_path: Path) -> Iterator[Stack]:
    """Environment for a whole run of its own: private SQLite file and Redis, free ports.

    Its worker never takes the session's retrievals. Every process started with `env` carries
    a unique variable, which is how tests find them (in /proc) wherever they were reparented;
    whatever is left at the end is killed.
    """
    from worker.store.migrate import upgrade

    redis = RedisServer(tmp_path).start()
    database_url = f"sqlite:///{tmp_path / 'run.db'}"
    upgrade(database_url)
    name, value = "EVIDENCE_TEST_RUN_MARKER", uuid.uuid4().hex
    running = Stack(
        {
            **os.environ,
            "EVIDENCE_DATABASE_URL": database_url,
            "EVIDENCE_BROKER_URL": redis.url,
            "EVIDENCE_API_PORT": str(free_port()),
            "EVIDENCE_FLOWER_PORT": str(free_port()),
            "EVIDENCE_FLOWER_BASIC_AUTH": f"ops:{uuid.uuid4().hex}",
            "EVIDENCE_WORKER_CONCURRENCY": "1",
            "PATH": f"{BIN}:{os.environ['PATH']}",
            name: value,
        },
        f"{name}={value}",
    )
    yield running
    for pid in running.processes():  # never leave anything behind, even when a test failed
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    redis.stop()
