"""`evidence flower` refuses a login without a user name or password, and starts nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import Env
from tests.support.services import free_port, wait_for
from worker.platform.settings import flower_logins

#: The console script `pip install` made, as an operator runs it.
EVIDENCE = Path(sys.executable).parent / "evidence"
#: A password no default could be; fixed, as it names tests (each test process collects the same).
SECRET = "pw-5e3c7a1b9d2f"


def _run_flower(auth: str | None, port: int, timeout: float = 20) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "EVIDENCE_FLOWER_BASIC_AUTH"}
    if auth is not None:
        env["EVIDENCE_FLOWER_BASIC_AUTH"] = auth
    try:
        return subprocess.run(
            [str(EVIDENCE), "flower", "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:  # run() has killed it by now
        pytest.fail(f"`evidence flower` started with {auth!r} instead of refusing it")


def _listening(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
    except httpx.HTTPError:
        return False
    return True


class TestFlowerPassword:
    """EVIDENCE_FLOWER_BASIC_AUTH must name a user and a password in every login."""

    @pytest.mark.parametrize(
        ("value", "says"),
        [
            ("admin:", "empty password"),
            (":", "empty user name"),
            (f":{SECRET}", "empty user name"),
            ("admin: ", "empty password"),
            ("admin", "no ':'"),
            ("", "not set"),
            (f"ops:{SECRET},guest:", "login 2 has an empty password"),
            (f"ops:{SECRET},", "login 2 has no ':'"),
        ],
    )
    def test_refused_by_the_command(self, value: str, says: str) -> None:
        """The real console script exits 2 with a clear message, and nothing listens."""
        port = free_port()
        done = _run_flower(value, port)
        assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
        assert "EVIDENCE_FLOWER_BASIC_AUTH" in done.stderr and says in done.stderr, done.stderr
        assert "Flower was not started" in done.stderr
        assert SECRET not in done.stderr + done.stdout  # the message never repeats a password
        assert not _listening(port)

    def test_unset_is_refused(self) -> None:
        """No variable at all is refused the same way."""
        done = _run_flower(None, free_port())
        assert done.returncode == 2 and "not set" in done.stderr, done.stderr

    @pytest.mark.parametrize(
        "value", ["ops:s3cret", "ops:pass:with:colons", f"ops:{SECRET},viewer:other"]
    )
    def test_good_values_pass(self, value: str) -> None:
        """A user and a non-empty password (colons allowed in it; several logins) pass."""
        assert all(user and password for user, password in flower_logins(value))

    def test_good_value_starts_flower(self, env: Env) -> None:
        """With a good login the same command serves Flower, behind that login."""
        port = free_port()
        login = ("ops", SECRET)
        log = open(env.tmp / f"flower-good-{port}.log", "wb")  # noqa: SIM115
        env_vars = {**os.environ, "EVIDENCE_FLOWER_BASIC_AUTH": ":".join(login)}
        proc = subprocess.Popen(
            [str(EVIDENCE), "flower", "--port", str(port)],
            env=env_vars,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: proc.poll() is not None or _listening(port), timeout=60, interval=0.3)
            assert proc.poll() is None, (env.tmp / f"flower-good-{port}.log").read_text()
            url = f"http://127.0.0.1:{port}/api/workers"
            assert httpx.get(url, timeout=10).status_code == 401
            assert httpx.get(url, auth=login, timeout=10).status_code == 200
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            log.close()
