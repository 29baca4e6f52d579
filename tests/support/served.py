"""The API or the MCP server as `evidence` serves them (real uvicorn processes), and raw sockets.

For what only a real server shows: connections, timeouts, bytes on the wire, other requests
waiting (or not) while some hang.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.services import ROOT, free_port, wait_for


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@contextmanager
def serve(
    args: list[str],
    log: Path,
    env: dict[str, str] | None = None,
    nofile: int | None = None,
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Run `evidence ARGS --port P` (optionally with at most `nofile` descriptors); yield P."""
    port = free_port()

    def limit_descriptors() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "api.cli", *args, "--port", str(port)],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=limit_descriptors,
        )
    try:
        wait_for(lambda: _listening(port) or proc.poll() is not None, timeout=60, interval=0.1)
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        yield port, proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextmanager
def served_api(
    log: Path,
    env: dict[str, str] | None = None,
    nofile: int | None = None,
    workers: int | None = None,
) -> Iterator[str]:
    """`evidence api` on a free loopback port; yield its base URL once /healthz answers.

    `workers` is its process count (default: the service's, one per CPU); a test of a limit
    each process keeps for itself serves one."""
    args = ["api", "--host", "127.0.0.1"] + ([] if workers is None else ["--workers", str(workers)])
    with serve(args, log, env, nofile) as (port, _):
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _up(url), timeout=60, interval=0.2)
        yield url


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def raw_request(port: int, head: bytes, timeout: float = 5.0) -> tuple[bytes, float]:
    """Send `head` alone on a new connection; return everything answered and the seconds taken.

    Reads until the server closes the connection or `timeout` passes.
    """
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head)
        return read_until_closed(sock, timeout), time.monotonic() - start


def read_until_closed(sock: socket.socket, timeout: float) -> bytes:
    """Bytes the server sends until it closes the connection (or `timeout` passes)."""
    deadline = time.monotonic() + timeout
    data = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def status_of(answer: bytes) -> int:
    """The status code of a raw HTTP response."""
    return int(answer.split(b" ", 2)[1])


def json_of(answer: bytes) -> object:
    """The JSON body of a raw (non-chunked) HTTP response."""
    import json

    return json.loads(answer.split(b"\r\n\r\n", 1)[1])
