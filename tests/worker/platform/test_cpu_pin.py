"""One CPU per process of many threads: which CPU, claims among siblings, and the pin itself."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from api.serving import cpu_claims
from api.serving.cpu_claims import CLAIMS_ENV
from tests.support.services import ROOT
from worker.platform.cpu_pin import choose
from worker.platform.settings import Settings

ALLOWED = os.sched_getaffinity(0)


def test_choose_auto_pins_only_where_there_is_a_choice() -> None:
    assert choose("auto", {0, 1}, pid=7) == 1
    assert choose("auto", {0, 1}, pid=8) == 0
    assert [choose("auto", {2, 5, 7}, pid) for pid in (30, 31, 32)] == [2, 5, 7]
    assert choose("auto", {3}, pid=7) is None
    assert choose("auto", set(), pid=7) is None


def test_choose_none_or_a_number() -> None:
    assert choose("none", {0, 1}, pid=7) is None
    assert choose(1, {0, 1}, pid=7) == 1
    assert choose(3, {3}, pid=7) == 3  # asked for, it pins even where there is no choice
    assert choose(5, {0, 1}, pid=7) is None  # not a CPU this process may use


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _end(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.communicate(timeout=10)  # reaps it and closes its pipes


CLAIMER = """
    import sys
    from pathlib import Path
    from worker.platform.cpu_pin import claim
    print(claim(Path(sys.argv[1]), {0, 1}), flush=True)
    sys.stdin.read()  # hold the claim until the test lets go
"""


def test_claims_spread_over_cpus_and_a_dead_siblings_cpu_is_taken_back(tmp_path: Path) -> None:
    claimers: list[subprocess.Popen[str]] = []

    def start() -> int:
        proc = _python(CLAIMER, str(tmp_path))
        claimers.append(proc)
        assert proc.stdout is not None
        return int(proc.stdout.readline())

    try:
        assert [start(), start(), start()] == [0, 1, 0]  # the third shares: both are held
        _end(claimers[0])
        assert start() == 0  # the first one's place, not a third on CPU 1
        assert start() == 1
    finally:
        for proc in claimers:
            if proc.returncode is None:
                _end(proc)


PINNER = """
    import os, threading, time
    from worker.platform.cpu_pin import pin, release
    allowed = os.sched_getaffinity(0)
    cpu = max(allowed)
    stop = threading.Event()
    before = threading.Thread(target=stop.wait)
    before.start()
    pin(cpu)
    after = threading.Thread(target=stop.wait)
    after.start()
    tids = [int(t) for t in os.listdir("/proc/self/task")]
    print(len(tids), cpu, sorted({frozenset(os.sched_getaffinity(t)) == {cpu} for t in tids}))
    release(allowed)
    print(os.sched_getaffinity(0) == allowed)
    stop.set()
"""


def test_pin_keeps_every_thread_on_the_cpu_and_release_gives_them_back() -> None:
    proc = _python(PINNER)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    pinned, released = out.splitlines()
    threads, cpu, all_pinned = pinned.split(" ", 2)
    assert int(threads) == 3  # the main thread, one started before the pin, one after
    assert int(cpu) == max(ALLOWED)
    assert all_pinned == "[True]"
    assert released == "True"


def test_settings_take_auto_none_or_a_cpu_number(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, parsed in (("auto", "auto"), ("none", "none"), ("3", 3), ("0", 0)):
        monkeypatch.setenv("EVIDENCE_WORKER_CPU", raw)
        assert Settings().worker_cpu == parsed
    for raw in ("-1", "first", "1.5"):
        monkeypatch.setenv("EVIDENCE_WORKER_CPU", raw)
        with pytest.raises(ValidationError):
            Settings()
    monkeypatch.delenv("EVIDENCE_WORKER_CPU")
    monkeypatch.setenv("EVIDENCE_API_CPU", "none")
    assert Settings().api_cpu == "none"
    monkeypatch.setenv("EVIDENCE_API_CPU", "2")
    with pytest.raises(ValidationError):
        Settings()


def test_an_api_process_whose_claims_directory_is_gone_serves_unpinned(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CLAIMS_ENV, str(tmp_path / "removed"))
    assert cpu_claims.take() is None
    assert os.sched_getaffinity(0) == ALLOWED  # this process was left as it was
    monkeypatch.delenv(CLAIMS_ENV)
    assert cpu_claims.take() is None  # `evidence api` made no directory: nothing to claim
