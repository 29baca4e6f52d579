"""Real services for tests: a throwaway database, and worker/beat/API processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

from tests.support.slowdown import scaled

ROOT = Path(__file__).resolve().parents[2]
POSTGRES_ADMIN_URL = os.environ.get(
    "EVIDENCE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def create_postgres_database() -> tuple[str, str]:
    """Create an empty database; return (its name, its SQLAlchemy URL)."""
    name = f"evidence_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
    return name, f"{base.replace('postgresql://', 'postgresql+psycopg://')}/{name}"


def drop_postgres_database(name: str) -> None:
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.1) -> object:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds on a
    quiet machine (longer on a busy one: the timeout only catches a hang)."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(interval)


class Process:
    """A service process (`evidence worker`, `evidence beat`, `evidence api`) for tests."""

    def __init__(
        self,
        args: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
    ) -> None:
        self.args = args
        self.log_path = log_path
        self.env = env
        self.cwd = cwd  # the tree whose code runs (`python -m` imports from it first)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        # The child gets its own copy of the descriptor: ours is closed as soon as it started.
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "api.cli", *self.args],
                cwd=self.cwd,
                env={**os.environ, **(self.env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def children(self) -> list[int]:
        """Pids of this process's direct children (the prefork pool)."""
        out = subprocess.run(
            ["pgrep", "-P", str(self.pid)], capture_output=True, text=True, check=False
        )
        return [int(p) for p in out.stdout.split()]

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.pid, sig)

    def kill_group(self) -> None:
        """SIGKILL the process and everything it started."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 15) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL if it does not end."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A private redis-server on its own loopback port, which tests may stop and start."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for(self.ping, timeout=10)
        return self

    def ping(self) -> bool:
        import redis

        try:
            with redis.Redis(port=self.port, socket_connect_timeout=0.2) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        """Stop without saving: the queue is lost, as in a real crash of a cache-only Redis."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
