"""Headless Chromium driven through chromedriver's WebDriver HTTP API (httpx, no extra package).

Debian's `chromium` and `chromium-driver` (`.ci/run` installs them): the pages are rendered and
their scripts run as an operator's browser runs them.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tests.support.services import free_port, wait_for

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: The flags the tests run Chromium with: headless, and nothing that reaches past loopback.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1600,1000",
]
#: WebDriver's key for an element reference in JSON.
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


def require_chromium() -> tuple[str, str]:
    """The Chromium and chromedriver binaries; fails the test, saying how to install them."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).exists()]
    if missing:
        raise AssertionError(
            f"{', '.join(missing)} not found: this test drives a real browser. Install it with "
            "`apt-get install -y chromium chromium-driver` (as root; .ci/run does)."
        )
    return CHROMIUM, CHROMEDRIVER


class Browser:
    """One headless Chromium session (its own profile directory), closed on exit."""

    def __init__(self, log: Path, extra_flags: tuple[str, ...] = ()) -> None:
        chromium, chromedriver = require_chromium()
        self._profile = tempfile.mkdtemp(prefix="chromium-")
        port = free_port()
        self._log = log.open("ab")
        self._driver = subprocess.Popen(
            [chromedriver, f"--port={port}", "--allowed-ips=127.0.0.1"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        self._session = ""
        try:
            wait_for(self._ready, timeout=30, interval=0.1)
            options = {
                "binary": chromium,
                "args": [*CHROMIUM_FLAGS, *extra_flags, f"--user-data-dir={self._profile}"],
            }
            capabilities = {"browserName": "chrome", "goog:chromeOptions": options}
            value = self._call("POST", "/session", {"capabilities": {"alwaysMatch": capabilities}})
            self._session = value["sessionId"]
        except BaseException:
            self.close()
            raise

    def _ready(self) -> bool:
        try:
            return bool(self._http.get("/status").json()["value"]["ready"])
        except (httpx.HTTPError, ValueError, KeyError):
            return False

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        response = self._http.request(method, path, json=payload)
        body = response.json()
        if response.status_code != 200:
            raise AssertionError(f"WebDriver {method} {path}: {response.status_code} {body}")
        return body["value"]

    def _session_call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        return self._call(method, f"/session/{self._session}{path}", payload)

    def open(self, url: str) -> None:
        """Navigate to `url` and wait for it to load."""
        self._session_call("POST", "/url", {"url": url})

    def run(self, script: str, *args: Any) -> Any:
        """Run `script` (a function body) in the page; what it returns."""
        return self._session_call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css: str) -> dict[str, str]:
        """The first element matching `css` (a WebDriver element reference)."""
        return self._session_call(  # type: ignore[no-any-return]
            "POST", "/element", {"using": "css selector", "value": css}
        )

    def click(self, element: dict[str, str]) -> None:
        self._session_call("POST", f"/element/{element[ELEMENT]}/click", {})

    def close(self) -> None:
        try:
            if self._session:
                self._call("DELETE", f"/session/{self._session}")
        except (httpx.HTTPError, AssertionError):
            pass
        finally:
            self._http.close()
            self._driver.terminate()
            try:
                self._driver.wait(10)
            except subprocess.TimeoutExpired:
                self._driver.kill()
                self._driver.wait(10)
            self._log.close()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
