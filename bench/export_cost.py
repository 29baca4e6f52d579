"""What a WACZ export and the raw route's reads cost: CPU seconds per 1 000 pages, package size.

Run: .venv/bin/python -m bench.export_cost [--pages 1000] [--rounds 3]

No services: the archive is built here as the worker builds it (`worker.archive.records`,
appended by `WarcFiles`), with the fixture site's pages (bench.pages: the bytes
bench.archive_cost serves) as 200 responses, then as many unchanged re-fetches (revisits of
them), and the index rows as `worker.store.archive_reads` reads them. Measured, in process CPU
seconds (the machine may be shared: not wall time), the median over the rounds:

* the export of every exchange (`worker.archive.export.write_wacz`: groups located and
  checked, copied, CDXJ-indexed by cdxj-indexer, zipped with sha256 of every file);
* reading every page's payload back as the raw route streams it (`reader.open_payload`).

Printed as a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.pages import render
from worker.archive import reader, records, selection
from worker.archive.export import write_wacz
from worker.archive.warc_files import WarcFiles
from worker.fetch.exchange import Exchange
from worker.store.archive_reads import IndexedExchange

WORKSPACE = uuid.UUID(int=7)
T0 = datetime(2026, 12, 1, tzinfo=UTC)
REQUEST = ((b"User-Agent", b"EvidenceRetrieval/0.1"), (b"Accept", b"text/html"))


def _exchange(index: int, at: datetime) -> Exchange:
    body = render(index).body
    headers = (
        (b"Content-Type", b"text/html; charset=utf-8"),
        (b"Content-Length", str(len(body)).encode()),
        (b"ETag", f'"{index}"'.encode()),
    )
    url = f"https://bench.example/page/{index}"
    return Exchange(url, at, REQUEST, "HTTP/1.1", 200, "OK", headers, body, False)


def build_archive(directory: Path, pages: int) -> tuple[list[IndexedExchange], int]:
    """Every page's response, then an unchanged re-fetch of each (a revisit); the rows and the
    bytes the pages' bodies hold."""
    files = WarcFiles(directory)
    rows: list[IndexedExchange] = []
    first: dict[int, records.Stored] = {}
    body_bytes = 0
    for round_ in (0, 1):
        for index in range(pages):
            exchange = _exchange(index, T0 + timedelta(days=round_, seconds=index))
            evidence_id = uuid.UUID(int=index + 1)
            metadata = {"evidence-id": str(evidence_id), "revision": "1"}
            built = records.build(exchange, metadata, first.get(index))
            name, offset = files.append(built.data)
            if round_ == 0:
                body_bytes += len(exchange.body)
                first[index] = records.Stored(
                    built.record_id, exchange.url, exchange.fetched_at, built.digest
                )
            rows.append(
                IndexedExchange(
                    built.record_id,
                    built.record_type,
                    WORKSPACE,
                    evidence_id,
                    1,
                    exchange.url,
                    exchange.fetched_at,
                    built.digest,
                    None if round_ == 0 else first[index].record_id,
                    name,
                    offset + built.offset,
                    built.length,
                    len(built.data),
                )
            )
    files.close()
    return rows, body_bytes


def measure(directory: Path, rows: list[IndexedExchange], out: Path) -> tuple[float, float, int]:
    """CPU seconds of one export of `rows` and of reading every payload; the package's size."""
    started = time.process_time()
    with out.open("wb") as handle:
        exported = write_wacz(
            directory, rows, selection.pages(rows), handle, title="bench", created=T0
        )
    export_cpu = time.process_time() - started
    started = time.process_time()
    for row in rows:
        if row.record_type == "response":
            with reader.open_payload(directory, row) as payload:
                for _ in payload.chunks():
                    pass
    read_cpu = time.process_time() - started
    return export_cpu, read_cpu, exported.package_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="export-cost-") as scratch:
        root = Path(scratch)
        rows, body_bytes = build_archive(root / "archive", args.pages)
        stored = selection.export_bytes(rows)
        results = [measure(root / "archive", rows, root / "out.wacz") for _ in range(args.rounds)]
    export_cpu = statistics.median(r[0] for r in results)
    read_cpu = statistics.median(r[1] for r in results)
    package = results[0][2]
    per_k = 1000 / args.pages
    table = Table(title=f"{args.pages} pages + {args.pages} revisits, median of {args.rounds}")
    for column in ("", "per 1 000 pages"):
        table.add_column(column)
    table.add_row("export CPU", f"{export_cpu * per_k:.2f} s")
    table.add_row("raw reads CPU (every payload)", f"{read_cpu * per_k:.2f} s")
    table.add_row("page bodies", f"{body_bytes * per_k / 1e6:.1f} MB")
    table.add_row("archived (what the limit counts)", f"{stored * per_k / 1e6:.1f} MB")
    table.add_row("package", f"{package * per_k / 1e6:.1f} MB ({package / stored:.3f} x archived)")
    console.print(table)
    print(
        json.dumps(
            {
                "pages": args.pages,
                "export_cpu_s": round(export_cpu, 3),
                "raw_read_cpu_s": round(read_cpu, 3),
                "body_bytes": body_bytes,
                "archived_bytes": stored,
                "package_bytes": package,
            }
        )
    )


if __name__ == "__main__":
    main()
