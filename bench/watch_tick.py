"""The watch scheduler's tick on PostgreSQL: 10 000 hourly watches over one simulated hour.

    .venv/bin/python bench/watch_tick.py [--watches 10000] [--workspaces 100] [--tick 15]

Ticks `worker.watches.scheduler.tick` every `--tick` simulated seconds (as beat sends them) for
one interval, each in its own transaction, and prints side by side: runs started, ticks, runs
per tick (mean, max), each tick's wall time (median, p95, max) and runs per simulated minute
(min, mean, max). Uses a throwaway database on EVIDENCE_TEST_POSTGRES_URL's server; drops it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.support.services import create_postgres_database, drop_postgres_database
from worker.store.migrate import upgrade
from worker.watches import scheduler, store

START = datetime(2026, 12, 5, 0, 0, tzinfo=UTC)
HOUR = 3600


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--watches", type=int, default=10_000)
    parser.add_argument("--workspaces", type=int, default=100)
    parser.add_argument("--tick", type=float, default=15.0)
    args = parser.parse_args()
    name, url = create_postgres_database()
    try:
        upgrade(url)
        engine = sa.create_engine(url)
        workspaces = [uuid.uuid4() for _ in range(args.workspaces)]
        with Session(engine) as session, session.begin():
            for n in range(args.watches):
                store.insert_watch(
                    session,
                    workspaces[n % len(workspaces)],
                    f"https://news{n % 97}.example.org/page/{n}",
                    "url_text",
                    "",
                    HOUR,
                    True,
                    START,
                )
        per_tick, seconds, per_minute = [], [], Counter()
        now = START
        while now < START + timedelta(seconds=HOUR):
            now += timedelta(seconds=args.tick)
            began = time.perf_counter()
            with Session(engine) as session, session.begin():
                report = scheduler.tick(session, now)
            seconds.append((time.perf_counter() - began) * 1000)
            per_tick.append(len(report.created))
            per_minute[now.replace(second=0, microsecond=0)] += len(report.created)
        seconds.sort()
        runs = sum(per_tick)
        minutes = [per_minute.get(START + timedelta(minutes=m), 0) for m in range(60)]
        print(f"watches {args.watches} in {args.workspaces} workspaces, interval 1 h")
        print(f"{'runs':>8} {'ticks':>6} {'per tick':>14} {'tick ms':>24} {'per minute':>20}")
        print(
            f"{runs:>8} {len(per_tick):>6} "
            f"{statistics.mean(per_tick):>6.1f} max {max(per_tick):>3} "
            f"{statistics.median(seconds):>6.1f} p95 {seconds[int(len(seconds) * 0.95)]:>5.1f}"
            f" max {seconds[-1]:>5.1f} "
            f"{min(minutes):>5} {statistics.mean(minutes):>6.1f} {max(minutes):>5}"
        )
        engine.dispose()
    finally:
        drop_postgres_database(name)


if __name__ == "__main__":
    main()
