"""The archive's disk use for `/metrics`, read from its index at scrape time.

`evidence_archive_bytes{workspace}`: bytes of archived records (request, response or revisit,
metadata) per workspace, the `TOP` largest with their own label value and the rest summed under
`workspace="other"`; `evidence_archive_exchanges{type}`: archived exchanges by record type.
One aggregate read of the index, cached like the other fleet-wide families.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from api.http.cached_collector import CachedCollector
from worker.store import archive_index, db

#: Workspaces with a series of their own.
TOP = 10


def bounded(by_workspace: dict[str, int], top: int = TOP) -> dict[str, int]:
    """The `top` largest workspaces' values, every other one summed under "other"."""
    largest = sorted(by_workspace, key=lambda w: (-by_workspace[w], w))[:top]
    out = {w: by_workspace[w] for w in largest}
    rest = sum(v for w, v in by_workspace.items() if w not in out)
    if rest:
        out["other"] = rest
    return out


class ArchiveCollector(CachedCollector):
    """Archived bytes per workspace and exchanges by type, from the index."""

    def _read(self) -> Iterator[Metric]:
        try:
            with db.session_scope(readonly=True) as session:
                sizes = archive_index.bytes_by_workspace(session)
                types = archive_index.count_by_type(session)
        except Exception:  # noqa: BLE001  (a scrape never fails; the state families say why)
            return
        size = GaugeMetricFamily(
            "evidence_archive_bytes",
            f"Bytes of archived WARC records of the {TOP} workspaces with the most; "
            'workspace="other" sums the rest.',
            labels=["workspace"],
        )
        for workspace, total in sorted(bounded({str(k): v for k, v in sizes.items()}).items()):
            size.add_metric([workspace], float(total))
        exchanges = GaugeMetricFamily(
            "evidence_archive_exchanges",
            "Archived exchanges, by the index's record type (response, revisit, not_modified).",
            labels=["type"],
        )
        for kind, count in sorted(types.items()):
            exchanges.add_metric([kind], float(count))
        yield size
        yield exchanges
