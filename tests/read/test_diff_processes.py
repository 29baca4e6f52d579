"""A diff's CPU runs in the API process's diff processes, never in the API process itself:
niced, and a process that dies or overruns fails only its own diff."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator

import pytest
from pebble import ProcessExpired

from api.auth import SCOPE_RESEARCH, Principal
from api.services import diff_processes, diff_render, evidence_diff
from tests.read.test_diff_bounds import FIRST, SECOND
from tests.read.test_evidence_diff import track
from tests.read.test_no_request_thread import with_request_threads_taken

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]


@pytest.fixture(autouse=True)
def _own_pool() -> Iterator[None]:
    diff_processes.stop()
    yield
    diff_processes.stop()


def _boom(*_: object) -> object:
    raise AssertionError("diffed in the API process")


def _priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def _die() -> None:
    os._exit(3)


def test_the_diff_is_not_computed_in_the_api_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cue matching made to fail in this process: the diff is still answered, so it ran in
    a process of its own."""
    monkeypatch.setattr(diff_render, "match_cues", _boom)
    workspace = uuid.uuid4()
    item = track(workspace, [FIRST, SECOND])
    principal = Principal(uuid.uuid4(), frozenset({workspace}), frozenset({SCOPE_RESEARCH}))
    body = with_request_threads_taken(lambda: evidence_diff.diff_json(principal, item, 1, 2))
    answer = json.loads(body)["diff"]
    assert answer["changed"] == ["text", "segments"] and answer["cues"]["changed"] > 0


def test_diff_processes_are_niced() -> None:
    assert diff_processes.run(1, _priority) == _priority() + diff_processes.DIFF_NICE


def test_a_dead_diff_process_fails_only_its_own_diff() -> None:
    with pytest.raises(ProcessExpired):
        diff_processes.run(1, _die)
    assert diff_processes.run(1, os.getpid) != os.getpid()


def test_an_overrunning_diff_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diff_processes, "DIFF_TIMEOUT_SECONDS", 0.5)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        diff_processes.run(1, time.sleep, 30)
    assert time.monotonic() - started < 20
    assert diff_processes.run(1, os.getpid) != os.getpid()
