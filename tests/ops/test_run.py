"""`make run`'s scripts, run for real: the supervisor stops everything, the env file exports.

The supervisor tests run the real Procfile (API, worker, sweeper, beat, Flower) on a stack of
their own (`tests.ops.conftest.stack`), and find every process it started by its marker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

from tests.ops.conftest import BIN, Stack
from tests.support.services import ROOT, wait_for

#: How long the supervisor may take to stop everything (its own bound is 15 s).
STOP_BOUND_SECONDS = 30
#: What `var/dev.env` must hand to the commands run after sourcing it.
DEV_ENV_NAMES = ("EVIDENCE_DEV_WORKSPACE", "EVIDENCE_API_KEY", "EVIDENCE_FLOWER_BASIC_AUTH")


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # after "pid (comm) state"


def command_lines(pids: list[int]) -> list[str]:
    lines = []
    for pid in pids:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        lines.append(raw.replace(b"\0", b" ").decode(errors="replace").strip())
    return lines


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code in (200, 401)
    except httpx.HTTPError:
        return False


def start_run(stack: Stack, cwd: Path) -> subprocess.Popen[bytes]:
    """`deploy/run.sh` piped into tee, leading a new session as a terminal's job would.

    Returns once the API answers /healthz, Flower answers, and both workers and beat logged
    that they started.
    """
    log = cwd / "run.log"
    script = f"'{ROOT}/deploy/run.sh' '{ROOT}/deploy/Procfile' 2>&1 | tee '{log}' >/dev/null"
    leader = subprocess.Popen(
        ["bash", "-c", script], cwd=cwd, env=stack.env, start_new_session=True
    )

    def started() -> bool:
        text = log.read_text(errors="replace") if log.exists() else ""
        return (
            _answers(f"http://127.0.0.1:{stack.env['EVIDENCE_API_PORT']}/healthz")
            and _answers(f"http://127.0.0.1:{stack.env['EVIDENCE_FLOWER_PORT']}/api/workers")
            and text.count(" ready.") >= 2
            and "beat: Starting" in text
        )

    try:
        wait_for(started, timeout=120, interval=0.5)
    except TimeoutError:
        os.killpg(leader.pid, signal.SIGKILL)
        raise AssertionError(f"the run did not start:\n{log.read_text(errors='replace')}") from None
    return leader


def assert_all_stop(stack: Stack, leader: subprocess.Popen[bytes]) -> None:
    """Within the bound, no process of the run is left, and the job itself has ended."""
    try:
        wait_for(lambda: not stack.processes(), timeout=STOP_BOUND_SECONDS, interval=0.2)
    except TimeoutError:
        left = command_lines(stack.processes())
        raise AssertionError(f"still running after {STOP_BOUND_SECONDS} s: {left}") from None
    assert leader.wait(5) is not None


class TestRunStopsEverything:
    """Whatever stops `make run`, nothing it started is left running."""

    def test_ctrl_c_with_output_piped_to_tee(self, stack: Stack, tmp_path: Path) -> None:
        """Ctrl-C (SIGINT to the foreground group: the script and tee) stops every process."""
        leader = start_run(stack, tmp_path)
        running = command_lines(stack.processes())
        for name in (
            "api",
            "worker --queues retrievals",
            "worker --queues sweep",
            "beat",
            "flower",
        ):
            assert any(f"evidence {name}" in line for line in running), running
        assert any("evidence flower" in line for line in running), running

        os.killpg(leader.pid, signal.SIGINT)
        assert_all_stop(stack, leader)

    def test_sigterm_to_the_supervisor(self, stack: Stack, tmp_path: Path) -> None:
        """SIGTERM to the script alone (what `make` forwards when it is terminated) stops all."""
        leader = start_run(stack, tmp_path)
        supervisor = [pid for pid in stack.processes() if parent_of(pid) == leader.pid]
        supervisor = [pid for pid in supervisor if "run.sh" in command_lines([pid])[0]]
        assert len(supervisor) == 1, command_lines(stack.processes())

        os.kill(supervisor[0], signal.SIGTERM)
        assert_all_stop(stack, leader)


def run_dev_env(stack: Stack, cwd: Path) -> None:
    subprocess.run(
        ["bash", str(ROOT / "deploy/dev-env.sh")],
        cwd=cwd,
        env={**stack.env, "EVIDENCE": str(BIN / "evidence")},
        check=True,
        capture_output=True,
        timeout=120,
    )


def seen_by_child(stack: Stack, cwd: Path) -> dict[str, str | None]:
    """Source var/dev.env in bash, then ask a child process which of its variables it got."""
    probe = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {DEV_ENV_NAMES}}}))"
    clean = {k: v for k, v in stack.env.items() if k not in DEV_ENV_NAMES}
    out = subprocess.run(
        ["bash", "-c", '. var/dev.env && exec "$0" -c "$1"', sys.executable, probe],
        cwd=cwd,
        env=clean,
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return json.loads(out.stdout)


class TestDevEnv:
    """`. var/dev.env` in a shell gives the commands run from it the key and the workspace."""

    def test_sourced_file_exports_its_variables(self, stack: Stack, tmp_path: Path) -> None:
        """A fresh var/dev.env: every variable reaches a child process of the shell."""
        run_dev_env(stack, tmp_path)
        seen = seen_by_child(stack, tmp_path)
        assert all(seen.values()), seen
        uuid.UUID(seen["EVIDENCE_DEV_WORKSPACE"])  # type: ignore[arg-type]
        assert seen["EVIDENCE_FLOWER_BASIC_AUTH"] == stack.env["EVIDENCE_FLOWER_BASIC_AUTH"]

    def test_older_file_is_upgraded(self, stack: Stack, tmp_path: Path) -> None:
        """A var/dev.env written without `export` is fixed in place, keeping its values."""
        (tmp_path / "var").mkdir()
        old = {name: f"value-{i}" for i, name in enumerate(DEV_ENV_NAMES)}
        (tmp_path / "var/dev.env").write_text("".join(f"{k}={v}\n" for k, v in old.items()))
        assert not any(seen_by_child(stack, tmp_path).values())

        run_dev_env(stack, tmp_path)
        assert seen_by_child(stack, tmp_path) == old
