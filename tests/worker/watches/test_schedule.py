"""Watch slots (worker/watches/schedule.py), exhaustively, and a fast-clock scheduler.

The simulation drives the real functions with a simulated clock: 10 000 watches of one hour
for 24 hours, a tick every 15 s as beat sends them, then the same with beat down for 3 hours.
"""

from __future__ import annotations

import heapq
import random
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from worker.watches.schedule import (
    MIN_INTERVAL_SECONDS,
    due_run,
    first_slot,
    offset_ms,
    run_mutation_id,
)

T0 = datetime(2026, 12, 5, 4, 0, 0, 123000, tzinfo=UTC)
HOUR = 3600
TICK = timedelta(seconds=15)


def _ids(n: int, seed: int = 41) -> list[uuid.UUID]:
    rng = random.Random(seed)
    return [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(n)]


class TestSlots:
    @pytest.mark.parametrize("interval", [MIN_INTERVAL_SECONDS, 301, 900, HOUR, 86_400])
    def test_offset_is_stable_and_within_the_interval(self, interval: int) -> None:
        for watch_id in _ids(200):
            offset = offset_ms(watch_id, interval)
            assert 0 <= offset < interval * 1000
            assert offset == offset_ms(uuid.UUID(str(watch_id)), interval)

    @pytest.mark.parametrize("interval", [MIN_INTERVAL_SECONDS, 301, HOUR])
    def test_first_slot_is_the_next_on_the_grid(self, interval: int) -> None:
        """Strictly after now, at most one interval later, on the watch's grid."""
        for watch_id in _ids(100):
            for now in (T0, T0 + timedelta(milliseconds=1), T0 + timedelta(days=400)):
                slot = first_slot(watch_id, interval, now)
                assert now < slot <= now + timedelta(seconds=interval)
                # On the grid: the slot itself is not "after" the slot before it.
                assert first_slot(watch_id, interval, slot - timedelta(milliseconds=1)) == slot
                assert first_slot(watch_id, interval, slot) == slot + timedelta(seconds=interval)

    def test_not_due_before_its_slot(self) -> None:
        (watch_id,) = _ids(1)
        slot = first_slot(watch_id, HOUR, T0)
        assert due_run(watch_id, HOUR, slot, slot - timedelta(milliseconds=1)) is None

    def test_due_at_its_slot_runs_it_with_nothing_missed(self) -> None:
        (watch_id,) = _ids(1)
        slot = first_slot(watch_id, HOUR, T0)
        for late in (timedelta(0), timedelta(seconds=15), timedelta(seconds=HOUR - 1)):
            run = due_run(watch_id, HOUR, slot, slot + late)
            assert run is not None
            assert (run.slot, run.missed) == (slot, 0)
            assert run.next_run_at == slot + timedelta(seconds=HOUR)

    @pytest.mark.parametrize("slots_late", [1, 2, 3, 10, 24 * 30])
    def test_late_runs_once_for_the_latest_slot_and_counts_the_rest(self, slots_late: int) -> None:
        (watch_id,) = _ids(1)
        slot = first_slot(watch_id, HOUR, T0)
        now = slot + timedelta(seconds=HOUR * slots_late, milliseconds=5)
        run = due_run(watch_id, HOUR, slot, now)
        assert run is not None
        assert run.slot == slot + timedelta(seconds=HOUR * slots_late)
        assert run.missed == slots_late
        assert run.slot <= now < run.next_run_at == run.slot + timedelta(seconds=HOUR)

    def test_off_grid_next_run_after_an_interval_change(self) -> None:
        """A next run not on the grid (the interval changed) still runs once, missing none."""
        (watch_id,) = _ids(1)
        off_grid = first_slot(watch_id, HOUR, T0) + timedelta(seconds=7)
        run = due_run(watch_id, HOUR, off_grid, off_grid + timedelta(seconds=1))
        assert run is not None and run.missed == 0 and run.next_run_at > off_grid

    def test_mutation_id_is_one_per_watch_and_slot(self) -> None:
        a, b = _ids(2)
        slot = first_slot(a, HOUR, T0)
        assert run_mutation_id(a, slot) == run_mutation_id(uuid.UUID(str(a)), slot)
        assert run_mutation_id(a, slot) != run_mutation_id(b, slot)
        assert run_mutation_id(a, slot) != run_mutation_id(a, slot + timedelta(seconds=HOUR))
        assert run_mutation_id(a, slot).version == 5


class Simulation:
    """Watches on a fast clock, ticked as beat would; every run started is logged."""

    def __init__(self, watch_ids: list[uuid.UUID], interval: int, start: datetime) -> None:
        self.interval = interval
        self.queue = [(first_slot(w, interval, start), w) for w in watch_ids]
        heapq.heapify(self.queue)
        self.runs: list[tuple[uuid.UUID, datetime, datetime]] = []  # (watch, slot, started at)
        self.missed: Counter[uuid.UUID] = Counter()

    def tick(self, now: datetime) -> None:
        while self.queue and self.queue[0][0] <= now:
            next_run_at, watch_id = heapq.heappop(self.queue)
            run = due_run(watch_id, self.interval, next_run_at, now)
            assert run is not None
            self.runs.append((watch_id, run.slot, now))
            self.missed[watch_id] += run.missed
            heapq.heappush(self.queue, (run.next_run_at, watch_id))

    def run_until(
        self, start: datetime, end: datetime, down: tuple[datetime, datetime] | None
    ) -> None:
        now = start
        while now < end:
            if down is None or not down[0] <= now < down[1]:
                self.tick(now)
            now += TICK


N = 10_000


class TestFastClock:
    def test_a_day_runs_each_slot_once_spread_over_the_hour(self) -> None:
        ids = _ids(N)
        sim = Simulation(ids, HOUR, T0)
        end = T0 + timedelta(hours=24)
        sim.run_until(T0, end, None)
        started = Counter((w, slot) for w, slot, _ in sim.runs)
        assert max(started.values()) == 1  # no slot twice
        # Every slot of every watch in the day, each started within one tick of it.
        expected = {
            (w, first_slot(w, HOUR, T0) + timedelta(hours=k))
            for w in ids
            for k in range(24)
            if first_slot(w, HOUR, T0) + timedelta(hours=k) <= end - TICK
        }
        assert set(started) == expected
        assert all(slot <= at < slot + TICK for _, slot, at in sim.runs)
        assert sum(sim.missed.values()) == 0
        per_minute = Counter(at.replace(second=0, microsecond=0) for _, _, at in sim.runs)
        minutes = 24 * 60
        mean = len(sim.runs) / minutes
        assert len(per_minute) == minutes  # no minute without runs
        assert max(per_minute.values()) <= 2 * mean, (max(per_minute.values()), mean)
        low, high = min(per_minute.values()), max(per_minute.values())
        print(f"\nruns {len(sim.runs)}, per minute: mean {mean:.1f}, min {low}, max {high}")

    def test_beat_down_three_hours_runs_each_missed_watch_once(self) -> None:
        ids = _ids(N)
        sim = Simulation(ids, HOUR, T0)
        down = (T0 + timedelta(hours=5), T0 + timedelta(hours=8))
        sim.run_until(T0, T0 + timedelta(hours=10), down)
        started = Counter((w, slot) for w, slot, _ in sim.runs)
        assert max(started.values()) == 1
        restart = [(w, slot) for w, slot, at in sim.runs if at == down[1]]
        # On restart every watch runs once (its latest slot was in the outage), none twice.
        assert sorted(w for w, _ in restart) == sorted(ids)
        for _, slot in restart:
            assert down[1] - timedelta(hours=1) < slot <= down[1]
        # Its slots in the outage before that one are counted, never run: 2 or 3 per watch.
        assert set(sim.missed.values()) <= {2, 3} and set(sim.missed) == set(ids)
        in_outage = [(w, s) for w, s, at in sim.runs if down[0] <= at < down[1]]
        assert in_outage == []
        # After the restart the watches are back on their grid, one run per slot.
        after = [(w, s, at) for w, s, at in sim.runs if at > down[1]]
        assert all(s <= at < s + TICK for _, s, at in after)
        assert {w for w, _, _ in after} == set(ids)
