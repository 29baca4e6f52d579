"""A WACZ 1.1.1 package of archived exchanges (https://specs.webrecorder.net/wacz/1.1.1/).

Laid out as py-wacz writes one, so `wacz validate`, pywb and replayweb.page open it:

* `archive/evidence-<time>-<random>.warc.gz`: each chosen exchange's records (request,
  response or revisit, metadata), copied byte for byte from the archive's files (each record
  is its own gzip member, so the copy is a valid WARC file). Stored, not deflated: replay
  tools read records at their offsets inside the ZIP;
* `indexes/index.cdx`: its CDXJ index (the spec names CDXJ files `.cdx`), by `cdxj-indexer`
  (sorted, with request bodies);
* `pages/pages.jsonl`: one page per archived payload;
* `datapackage.json` (every file's sha256 and size) and `datapackage-digest.json` (the
  digest of `datapackage.json`).

Bounded memory: records are copied in 64 KiB chunks and the index sorted by cdxj-indexer
(in memory up to 32 MiB, then in temporary files); the package is written to a file.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import IO

from cdxj_indexer.main import write_cdx_index
from warcio.timeutils import datetime_to_iso_date

from worker.archive import reader
from worker.archive.selection import Page
from worker.store.archive_reads import IndexedExchange

WACZ_VERSION = "1.1.1"
MEDIA_TYPE = "application/wacz"


@dataclass(frozen=True)
class Exported:
    """What one package holds."""

    exchanges: int
    pages: int
    warc_bytes: int
    package_bytes: int


def _software() -> str:
    try:
        return f"evidence-retrieval {metadata.version('evidence-retrieval')}"
    except metadata.PackageNotFoundError:  # run from a source tree
        return "evidence-retrieval"


def _hashed(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(reader.CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return "sha256:" + digest.hexdigest(), size


def _iso(moment: datetime) -> str:
    text: str = datetime_to_iso_date(moment.astimezone(UTC).replace(tzinfo=None), use_micros=True)
    return text


def pages_jsonl(pages: Sequence[Page], title: str) -> str:
    """The pages list: a header line, then one JSON object per page."""
    lines = [json.dumps({"format": "json-pages-1.0", "id": "pages", "title": title})]
    lines += [json.dumps({"id": p.id, "url": p.url, "ts": _iso(p.ts)}) for p in pages]
    return "\n".join(lines) + "\n"


def datapackage(resources: Sequence[tuple[str, str, int]], title: str, created: datetime) -> bytes:
    """`datapackage.json` for files given as (path in the ZIP, sha256, bytes)."""
    document = {
        "profile": "data-package",
        "resources": [
            {"name": Path(path).name.lower(), "path": path, "hash": digest, "bytes": size}
            for path, digest, size in resources
        ],
        "title": title,
        "created": created.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wacz_version": WACZ_VERSION,
        "software": _software(),
    }
    return json.dumps(document, indent=2).encode()


def digest_document(datapackage_bytes: bytes) -> bytes:
    """`datapackage-digest.json`: the sha256 of `datapackage.json` as written."""
    digest = "sha256:" + hashlib.sha256(datapackage_bytes).hexdigest()
    return json.dumps({"path": "datapackage.json", "hash": digest}, indent=2).encode()


def write_wacz(
    directory: Path,
    exchanges: Sequence[IndexedExchange],
    pages: Sequence[Page],
    out: IO[bytes],
    *,
    title: str,
    created: datetime,
) -> Exported:
    """Write the package of `exchanges` (read from the archive `directory`) to `out`, a file
    open for writing (seekable)."""
    # A name of its own: several exports may be unpacked into one collection (pywb).
    warc_name = f"evidence-{created.astimezone(UTC):%Y%m%d%H%M%S}-{secrets.token_hex(4)}.warc.gz"
    with tempfile.TemporaryDirectory(prefix="wacz-") as scratch:
        root = Path(scratch)
        files = {
            "archive/" + warc_name: root / warc_name,
            "indexes/index.cdx": root / "index.cdx",
            "pages/pages.jsonl": root / "pages.jsonl",
        }
        spans = [reader.group_span(directory, exchange) for exchange in exchanges]
        with files["archive/" + warc_name].open("wb") as warc:
            for span in spans:
                for _ in reader.copy_span(span, warc):
                    pass
        with (
            files["indexes/index.cdx"].open("w", encoding="utf-8") as index,
            files["archive/" + warc_name].open("rb") as warc_in,
        ):
            # `post_append`: a POST's body joins its URL key, as pywb and py-wacz index it.
            options = {"sort": True, "post_append": True, "filename": warc_name}
            write_cdx_index(index, warc_in, options)
        files["pages/pages.jsonl"].write_text(pages_jsonl(pages, title), encoding="utf-8")

        stamp = created.astimezone(UTC).timetuple()[:6]
        resources = []
        with zipfile.ZipFile(out, "w", allowZip64=True) as package:
            for name, path in files.items():
                digest, size = _hashed(path)
                resources.append((name, digest, size))
                info = zipfile.ZipInfo(name, date_time=stamp)
                # Stored: replay tools seek into the WARC and the index inside the ZIP.
                info.compress_type = (
                    zipfile.ZIP_DEFLATED if name.startswith("pages/") else zipfile.ZIP_STORED
                )
                info.file_size = size
                with path.open("rb") as source, package.open(info, "w") as target:
                    shutil.copyfileobj(source, target, reader.CHUNK)
            described = datapackage(resources, title, created)
            for name, data in (
                ("datapackage.json", described),
                ("datapackage-digest.json", digest_document(described)),
            ):
                info = zipfile.ZipInfo(name, date_time=stamp)
                info.compress_type = zipfile.ZIP_DEFLATED
                package.writestr(info, data)
        warc_bytes = resources[0][2]
    return Exported(len(exchanges), len(pages), warc_bytes, out.tell())
