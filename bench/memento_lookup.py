"""A TimeMap's lookup (`worker.store.mementos.url_revisions`) in a workspace holding many items,
on PostgreSQL: the query as it first was (workspace and URL only) beside the query naming every
kind, which lets the identity index (workspace, kind, url_key, language) find the URL directly.

    .venv/bin/python bench/memento_lookup.py [--items 50000] [--runs 300]

Prints the median and p95 ms per lookup for each, and each plan's top line. Uses a throwaway
database on EVIDENCE_TEST_POSTGRES_URL's server; drops it after.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa

from tests.support.services import create_postgres_database, drop_postgres_database
from worker.store import mementos
from worker.store.evidence import EVIDENCE, REVISION
from worker.store.migrate import upgrade


def plain(workspace: uuid.UUID, url_key: str) -> sa.Select:  # type: ignore[type-arg]
    """The lookup without the kind prefix (as first written)."""
    return (
        sa.select(REVISION.c.evidence_id, REVISION.c.revision, REVISION.c.created_at)
        .join(EVIDENCE, EVIDENCE.c.id == REVISION.c.evidence_id)
        .where(EVIDENCE.c.workspace_id == workspace, EVIDENCE.c.url_key == url_key)
        .order_by(REVISION.c.created_at, REVISION.c.evidence_id, REVISION.c.revision)
    )


def timed(engine: sa.Engine, run: object, runs: int) -> tuple[float, float]:
    samples = []
    with engine.connect() as conn:
        for _ in range(runs):
            start = time.perf_counter()
            run(conn)  # type: ignore[operator]
            samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    name, url = create_postgres_database()
    try:
        upgrade(url)
        engine = sa.create_engine(url)
        workspace = uuid.uuid4()
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO evidence (id, workspace_id, kind, url_key, language, "
                    "latest_revision, created_at) SELECT gen_random_uuid(), :w, "
                    "CASE WHEN n % 2 = 0 THEN 'url_text' ELSE 'published_captions' END, "
                    "'https://example.org/page/' || n, '', 3, now() FROM generate_series(1, :n) n"
                ),
                {"w": workspace, "n": args.items},
            )
            conn.execute(
                sa.text(
                    "INSERT INTO evidence_revision (evidence_id, revision, content_sha256, text, "
                    "segments, provenance, created_at) SELECT e.id, r, md5(e.id::text || r), "
                    "'text', '[]', '{}', now() - make_interval(days => 3 - r) "
                    "FROM evidence e, generate_series(1, 3) r"
                )
            )
            conn.execute(sa.text("ANALYZE"))
        key = f"https://example.org/page/{args.items // 2}"
        print(
            f"{args.items} items, 3 revisions each, one workspace; {args.runs} lookups of one URL"
        )
        for label, query in (
            ("workspace + url", plain(workspace, key)),
            ("workspace + kinds + url", mementos.lookup(workspace, key)),
        ):
            with engine.connect() as conn:
                found = conn.execute(query).all()
                compiled = query.compile(engine, compile_kwargs={"literal_binds": True})
                plan = conn.execute(sa.text(f"EXPLAIN {compiled}")).scalars().all()
            median, p95 = timed(engine, lambda c, q=query: c.execute(q).all(), args.runs)
            scans = [line.strip() for line in plan if "Scan" in line and "evidence " in line]
            print(f"  {label:24s} {len(found)} rows  median {median:6.3f} ms  p95 {p95:6.3f} ms")
            print(f"  {'':24s} {scans[0] if scans else plan[0]}")
        engine.dispose()
    finally:
        drop_postgres_database(name)


if __name__ == "__main__":
    main()
