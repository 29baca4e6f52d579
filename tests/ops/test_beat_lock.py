"""Beat on several hosts, one sending (worker/jobs/beat_lock.py): real `evidence beat`
processes against a Redis of their own, whose sweep queue nobody consumes, so every sweep
message they send stays there and names its sender (Celery's `origin` header, `gen<pid>@host`).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.services import Process, RedisServer, wait_for
from tests.support.slowdown import scaled
from worker.jobs.beat_lock import LOCK_KEY
from worker.jobs.celery_app import SWEEP_QUEUE, SWEEP_TASK

#: Beat sends the sweep every second here; its lock lives this long unrenewed (on a quiet
#: machine: stretched by the session's slowdown, so a busy one never loses a live holder's lock).
SWEEP_INTERVAL = 1.0
LOCK_TIMEOUT = 3.0
#: How long after its holder is killed another beat must send: the lock's timeout, plus the
#: standby's poll (the sweep interval here), plus a margin for starting to send.
TAKEOVER_BOUND = LOCK_TIMEOUT + SWEEP_INTERVAL
TAKEOVER_MARGIN = 5.0


class Beats:
    """Redis of their own and `evidence beat` processes against it."""

    def __init__(self, tmp: Path, lock_timeout: float) -> None:
        self.tmp = tmp
        self.redis = RedisServer(tmp).start()
        self.client = redis.Redis(port=self.redis.port, socket_timeout=5)
        self.env = {
            "EVIDENCE_BROKER_URL": self.redis.url,
            "EVIDENCE_REDIS_URL": self.redis.url,
            "EVIDENCE_SWEEP_INTERVAL_SECONDS": f"{SWEEP_INTERVAL:g}",
            "EVIDENCE_BEAT_LOCK_TIMEOUT_SECONDS": f"{lock_timeout:g}",
        }
        self.processes: list[Process] = []

    def start(self, name: str) -> Process:
        process = Process(["beat"], self.tmp / f"{name}.log", self.env).start()
        self.processes.append(process)
        return process

    def senders(self, since: int = 0) -> list[int]:
        """The pid of the beat that sent each sweep message in the queue, oldest first."""
        raw = self.client.lrange(SWEEP_QUEUE, 0, -1)
        headers = [json.loads(message)["headers"] for message in reversed(raw)]
        origins = [h["origin"] for h in headers if h["task"] == SWEEP_TASK][since:]
        return [int(origin.removeprefix("gen").partition("@")[0]) for origin in origins]

    def holder(self) -> int | None:
        """The pid in the lock's value (`host:pid:random`), or None when no beat holds it."""
        value = self.client.get(LOCK_KEY)
        return int(value.decode().split(":")[1]) if value else None

    def stop(self) -> None:
        for process in self.processes:
            process.kill_group()
        self.client.close()
        self.redis.stop()


@pytest.fixture
def beats(tmp_path: Path) -> Iterator[Beats]:
    running = Beats(tmp_path, scaled(LOCK_TIMEOUT))
    yield running
    running.stop()


def two_beats(beats: Beats) -> tuple[Process, Process]:
    """Two beats started, one holding the lock and sending, the other standing by: (holder,
    standby)."""
    first, second = beats.start("first"), beats.start("second")
    wait_for(lambda: "beat_standing_by" in first.log() + second.log(), timeout=30)
    holder = wait_for(beats.holder, timeout=30)
    assert holder in (first.pid, second.pid)
    return (first, second) if holder == first.pid else (second, first)


def test_two_beats_one_sends(beats: Beats) -> None:
    """Both beats run side by side for a dozen sweeps: every one is sent by the lock's holder,
    and the other says it stands by."""
    holder, standby = two_beats(beats)
    start = len(beats.senders())
    wait_for(lambda: len(beats.senders(start)) >= 12, timeout=60)
    assert holder.alive() and standby.alive()
    assert set(beats.senders(start)) == {holder.pid}
    assert "beat_standing_by" in standby.log()
    assert "beat_lock_acquired" not in standby.log()


def test_holder_killed_the_other_takes_over(beats: Beats) -> None:
    """kill -9 of the holder: the standby sends the sweep within the lock's timeout plus its
    poll (and a margin), and from then on it alone sends."""
    holder, standby = two_beats(beats)
    wait_for(lambda: beats.senders(), timeout=30)
    os.killpg(holder.pid, signal.SIGKILL)
    assert holder.proc is not None
    holder.proc.wait(10)
    killed_at, sent = time.monotonic(), len(beats.senders())
    # wait_for stretches the bound by the session's slowdown, as the lock's timeout was.
    wait_for(lambda: standby.pid in beats.senders(sent), timeout=TAKEOVER_BOUND + TAKEOVER_MARGIN)
    took = time.monotonic() - killed_at
    print(f"takeover after {took:.1f} s (lock timeout {scaled(LOCK_TIMEOUT):.1f} s)")
    assert set(beats.senders(sent)) == {standby.pid}
    assert beats.holder() == standby.pid
    assert "beat_lock_acquired" in standby.log()


def test_holder_stopped_gives_the_lock_up(tmp_path: Path) -> None:
    """A holder stopped cleanly (SIGTERM) releases its lock: with a lock of ten minutes, the
    standby still sends within seconds."""
    beats = Beats(tmp_path, lock_timeout=600)
    try:
        holder, standby = two_beats(beats)
        holder.stop()
        assert "beat_lock_released" in holder.log()
        sent = len(beats.senders())
        wait_for(lambda: standby.pid in beats.senders(sent), timeout=30)
        assert beats.holder() == standby.pid
    finally:
        beats.stop()


def test_redis_restarted_empty(beats: Beats) -> None:
    """Redis lost everything (restarted without its data): beat survives the outage, writes the
    schedule again and goes on sending; the outage is logged, not fatal."""
    only = beats.start("only")
    wait_for(lambda: beats.senders(), timeout=30)
    beats.redis.stop()
    wait_for(lambda: "beat_redis_unavailable" in only.log() or not only.alive(), timeout=30)
    assert only.alive(), only.log()[-2000:]
    beats.redis.start()
    wait_for(lambda: beats.senders(), timeout=60)
    assert only.alive()
    assert beats.holder() == only.pid
    assert set(beats.senders()) == {only.pid}


def test_holder_paused_past_its_lock_stands_by_when_it_resumes(beats: Beats) -> None:
    """A holder frozen (SIGSTOP) past the lock's timeout: the other takes over; the frozen one,
    resumed, finds its lock lost at its next renewal and stands by. A send it had begun before
    it froze may still go out once (harmless: every sweep step is fenced), never more."""
    holder, standby = two_beats(beats)
    wait_for(lambda: beats.senders(), timeout=30)
    holder.signal(signal.SIGSTOP)
    try:
        sent = len(beats.senders())
        wait_for(lambda: standby.pid in beats.senders(sent), timeout=TAKEOVER_BOUND + 5)
    finally:
        holder.signal(signal.SIGCONT)
    wait_for(lambda: "beat_lock_lost" in holder.log(), timeout=30)
    resumed = len(beats.senders())
    wait_for(lambda: len(beats.senders(resumed)) >= 6, timeout=60)
    assert beats.senders(resumed).count(holder.pid) <= 1
    assert beats.senders(resumed)[-5:] == [standby.pid] * 5
    assert beats.holder() == standby.pid
