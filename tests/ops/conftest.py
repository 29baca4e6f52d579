"""Operations tests: a real `evidence api` process over HTTP, beside the session worker and beat."""

from __future__ import annotations

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
from tests.support.services import Process, free_port, wait_for
from tests.support.tls_site import TLSSite

Labels = frozenset[tuple[str, str]]


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
