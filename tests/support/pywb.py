"""pywb, the Webrecorder replay server, run as a process on loopback to replay exports.

pywb pins `redis==2.10.6` (and `fakeredis<1`), which our `redis>=5` cannot live beside, so it
lives in a venv of its own, `var/tools/pywb`, which `make test` makes beside `.venv`
(EVIDENCE_TEST_PYWB_VENV names another). Collections are made with `wb-manager`; the server
finds collections added after it started.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("EVIDENCE_TEST_PYWB_VENV", ROOT / "var" / "tools" / "pywb"))
REQUIREMENT = "pywb>=2.10"


def venv() -> Path:
    """The venv's bin directory. `make test` makes it: a test reaches no registry."""
    bin_dir = VENV / "bin"
    if not (bin_dir / "wayback").exists():
        raise RuntimeError(
            f"pywb is not installed in {VENV}: run `make var/tools/pywb/bin/wayback` (or "
            f"`python3 -m venv {VENV} && {VENV}/bin/pip install '{REQUIREMENT}'`)"
        )
    return bin_dir


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Pywb:
    """A `wayback` server over the collections of `root`."""

    def __init__(self, root: Path) -> None:
        self.bin = venv()
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.log = (root / "wayback.log").open("wb")
        self.process = subprocess.Popen(
            [str(self.bin / "wayback"), "-b", "127.0.0.1", "-p", str(self.port), "-t", "2"],
            cwd=root,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(self.base + "/", timeout=2)
                break
            except httpx.TransportError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"wayback did not start: {self.output()}") from None
                time.sleep(0.2)

    def output(self) -> str:
        self.log.flush()
        return (self.root / "wayback.log").read_text(errors="replace")[-4000:]

    def manager(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.bin / "wb-manager"), *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout + done.stderr

    def add_collection(self, name: str, wacz: Path) -> None:
        """A new collection holding the WARCs of `wacz`, indexed."""
        self.manager("init", name)
        self.manager("add", "--unpack-wacz", name, str(wacz))

    def replay(self, collection: str, timestamp: str, url: str) -> httpx.Response:
        """The archived response for `url` nearest `timestamp` (14 digits), as recorded
        (`id_`: pywb's mode that returns the original bytes, unrewritten)."""
        return httpx.get(f"{self.base}/{collection}/{timestamp}id_/{url}", timeout=30)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)
        self.log.close()
