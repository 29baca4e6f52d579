"""deploy/nginx.conf keeps to the service's own bounds, and docker-compose puts it in front."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from worker.platform.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CONF = (DEPLOY / "nginx.conf").read_text(encoding="utf-8")
#: Directives in effect (commented lines left out).
LIVE = "\n".join(line.split("#", 1)[0] for line in CONF.splitlines())
UNITS = {"": 1, "k": 1024, "m": 1024 * 1024}


def directive(name: str) -> str:
    found = re.findall(rf"^\s*{name}\s+([^;]+);", LIVE, re.MULTILINE)
    assert len(found) == 1, (name, found)
    return found[0].strip()


def default(name: str) -> object:
    return Settings.model_fields[name].default


def test_body_size_matches() -> None:
    """nginx refuses exactly what the API refuses, with the API's answer."""
    size, unit = re.fullmatch(r"(\d+)([km]?)", directive("client_max_body_size")).groups()  # type: ignore[union-attr]
    limit = default("max_body_bytes")
    assert int(size) * UNITS[unit] == limit
    assert f'"max_body_bytes":{limit}' in LIVE


def test_timeouts_match() -> None:
    """Headers get the API's header deadline; upstream keep-alives end before the API's do."""
    assert directive("client_header_timeout") == f"{default('http_header_timeout_seconds'):g}s"
    upstream = re.search(r"upstream evidence_api \{(.*?)\}", LIVE, re.DOTALL)
    assert upstream is not None
    keepalive = re.search(r"keepalive_timeout\s+(\d+)s;", upstream.group(1))
    assert keepalive is not None
    assert int(keepalive.group(1)) < default("http_keepalive_seconds")  # type: ignore[operator]
    assert "keepalive 64;" in upstream.group(1)
    assert default("http_limit_concurrency") > 64  # type: ignore[operator]


def test_compose_puts_the_proxy_in_front() -> None:
    """Only the proxy publishes a port for the API; it mounts this configuration."""
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert "ports" not in services["api"]
    assert "./nginx.conf:/etc/nginx/nginx.conf:ro" in services["proxy"]["volumes"]
    assert any(port.endswith(":8080") for port in services["proxy"]["ports"])
