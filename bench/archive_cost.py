"""What archiving each exchange as WARC costs: disk per 1 000 pages, and CPU per retrieval.

Run: .venv/bin/python -m bench.archive_cost [--pages 1000] [--rounds 2]

For each round, two stacks one after the other (bench.service: PostgreSQL, Redis, API,
worker, beat), one with EVIDENCE_ARCHIVE_ENABLED=false and one with it true, against the
same loopback fixture site (bench.site, strong ETags, 304 to a matching If-None-Match). Each
stack runs pass 1 (every page fetched, a new revision each) and pass 2 (the same URLs again:
304 revalidations, which archive revisits). Printed side by side: API+worker CPU seconds of
each pass, PostgreSQL's (the stack database's backends) beside them, and with the archive on,
the bytes of its WARC files and its index rows per 1 000 pages, against the bytes the site
sent, and the worker's CPU in the archive's own code (bench.probe: queuing, look-ups,
records, write and fsync; not its index rows' share of the commit's executemany); then the
medians over the rounds of each setting (CPU time, not wall time: the machine
may be shared). One JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from bench.revalidation import Pass, database, run_pass
from bench.service import Stack
from bench.throughput import Site

console = Console(stderr=True, width=120)


@dataclass
class Round:
    """One stack's two passes, and what its archive holds after them."""

    archive: bool
    first: Pass
    second: Pass
    files_bytes: int
    index: dict[str, tuple[int, int]]


def index_rows(stack: Stack) -> dict[str, tuple[int, int]]:
    """(rows, bytes of their records) per record type of the archive's index."""
    with database(stack) as conn:
        found = conn.execute(
            "SELECT record_type, count(*), coalesce(sum(group_bytes), 0) FROM archive_record"
            " GROUP BY record_type"
        ).fetchall()
    return {str(kind): (int(n), int(size)) for kind, n, size in found}  # type: ignore[call-overload]


def archive_ms(one: Pass, pages: int) -> float:
    """The worker's CPU in the archive's own code (bench.probe), in ms a retrieval."""
    return one.probe.get("archive", 0.0) / pages * 1000


def run_round(tmp: Path, site: Site, archive: bool) -> Round:
    directory = tmp / f"archive-{uuid.uuid4().hex[:6]}"
    os.environ["EVIDENCE_ARCHIVE_ENABLED"] = "true" if archive else "false"
    os.environ["EVIDENCE_ARCHIVE_DIR"] = str(directory)
    stack = Stack(tmp, site.info).start()
    try:
        workspace = str(uuid.uuid4())
        key = stack.cli("keys", "create", "--workspace", workspace).strip().splitlines()[-1]
        first = run_pass(stack, site, workspace, key, f"first-{archive}")
        second = run_pass(stack, site, workspace, key, f"second-{archive}")
        index = index_rows(stack) if archive else {}
    finally:
        stack.stop()
    files = sum(p.stat().st_size for p in directory.glob("*")) if directory.exists() else 0
    return Round(archive, first, second, files, index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="evidence-bench-archive-"))
    site = Site(tmp, args.pages, args.hosts, 0.0, ("--validators",))
    rounds: list[Round] = []
    try:
        for n in range(args.rounds):
            for archive in (False, True) if n % 2 == 0 else (True, False):
                rounds.append(run_round(tmp, site, archive))
                console.log(rounds[-1])
    finally:
        site.stop()
    per_k = 1000 / args.pages
    console.print(f"{args.pages} pages, {os.cpu_count()} cores")
    for r in rounds:
        sent = r.first.site_bytes * per_k / 1e6
        line = (
            f"  archive {'on ' if r.archive else 'off'}: pass 1 CPU {r.first.cpu:.2f} s "
            f"({r.first.cpu / args.pages * 1000:.2f} ms/retrieval) + postgres "
            f"{r.first.cpu_postgres:.2f} s, {r.first.ready} ready; pass 2 (304s) CPU "
            f"{r.second.cpu:.2f} s + postgres {r.second.cpu_postgres:.2f} s "
            f"({r.second.cpu / r.first.cpu:.1%} of pass 1); site sent {sent:.2f} MB per 1 000 pages"
        )
        if r.archive:
            line += (
                f"; the archive's own work (worker threads' CPU): pass 1 "
                f"{archive_ms(r.first, args.pages):.3f} ms a retrieval, pass 2 "
                f"{archive_ms(r.second, args.pages):.3f} ms"
            )
        if r.archive:
            warc = r.files_bytes * per_k / 1e6
            line += f"; WARC files {warc:.2f} MB per 1 000 pages, index {r.index}"
        console.print(line)
    off = [r for r in rounds if not r.archive]
    on = [r for r in rounds if r.archive]
    medians = {
        setting: {
            "first": statistics.median(r.first.cpu for r in rs),
            "first_postgres": statistics.median(r.first.cpu_postgres for r in rs),
            "second": statistics.median(r.second.cpu for r in rs),
            "second_postgres": statistics.median(r.second.cpu_postgres for r in rs),
            "second_share": statistics.median(r.second.cpu / r.first.cpu for r in rs),
            "archive_ms_first": statistics.median(archive_ms(r.first, args.pages) for r in rs),
            "archive_ms_second": statistics.median(archive_ms(r.second, args.pages) for r in rs),
        }
        for setting, rs in (("off", off), ("on", on))
    }
    for setting, m in medians.items():
        console.print(
            f"  median, archive {setting}: pass 1 {m['first']:.2f} s + postgres "
            f"{m['first_postgres']:.2f} s; pass 2 {m['second']:.2f} s + postgres "
            f"{m['second_postgres']:.2f} s; pass 2 / pass 1 {m['second_share']:.1%} (target ≤ 25 %)"
            + (
                f"; the archive's own work {m['archive_ms_first']:.3f} ms a retrieval in pass 1, "
                f"{m['archive_ms_second']:.3f} ms in pass 2"
                if setting == "on"
                else ""
            )
        )
    cpu_off, cpu_on = medians["off"]["first"], medians["on"]["first"]
    all_off = medians["off"]["first"] + medians["off"]["first_postgres"]
    all_on = medians["on"]["first"] + medians["on"]["first_postgres"]
    second_off = medians["off"]["second"] + medians["off"]["second_postgres"]
    second_on = medians["on"]["second"] + medians["on"]["second_postgres"]
    console.print(
        f"  pass 1 CPU with the archive: {cpu_on / cpu_off - 1:+.1%} API+worker, "
        f"{all_on / all_off - 1:+.1%} with postgres (target ≤ +10 %); pass 2: "
        f"{medians['on']['second'] / medians['off']['second'] - 1:+.1%} API+worker, "
        f"{second_on / second_off - 1:+.1%} with postgres"
    )
    print(
        json.dumps(
            {
                "pages": args.pages,
                "rounds": [
                    {
                        "archive": r.archive,
                        "cpu_first": r.first.cpu,
                        "cpu_second": r.second.cpu,
                        "cpu_postgres_first": r.first.cpu_postgres,
                        "cpu_postgres_second": r.second.cpu_postgres,
                        "archive_ms_first": archive_ms(r.first, args.pages),
                        "archive_ms_second": archive_ms(r.second, args.pages),
                        "site_bytes_first": r.first.site_bytes,
                        "files_bytes": r.files_bytes,
                        "index": r.index,
                    }
                    for r in rounds
                ],
                "medians": medians,
                "cpu_ratio": cpu_on / cpu_off,
            }
        )
    )


if __name__ == "__main__":
    main()
