"""The bench's figures: a rich table for people and one JSON line for machines."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table


def label(latency: float | str) -> str:
    """A latency for people and keys: "0", "200" (ms) or "mix"."""
    return latency if isinstance(latency, str) else f"{latency:g}"


@dataclass
class Runs:
    """Repeated measurements of one contender at one latency."""

    name: str
    latency_ms: float | str
    rps: list[float] = field(default_factory=list)
    cpu_per: list[float] = field(default_factory=list)  # its own CPU seconds per retrieval
    site_cpu_per: list[float] = field(default_factory=list)  # the fixture site's, per retrieval
    split: list[dict[str, float]] = field(default_factory=list)  # service only
    #: Share of the machine's cores busy during each run (every process, not only its own).
    busy: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.rps) if self.rps else 0.0

    def busy_cell(self) -> str:
        """The median share of the machine busy during a run, "-" when not measured."""
        return f"{statistics.median(self.busy) * 100:.0f} %" if self.busy else "-"

    def spread(self) -> str:
        """ "median (min–max, n)"."""
        if not self.rps:
            return "-"
        if len(self.rps) == 1:
            return f"{self.rps[0]:.1f}"
        return f"{self.median:.1f} ({min(self.rps):.1f}–{max(self.rps):.1f}, n={len(self.rps)})"


def mean_split(runs: Runs) -> dict[str, float]:
    """Average of the per-run CPU splits (seconds per retrieval)."""
    keys = list(dict.fromkeys(k for split in runs.split for k in split))
    return {k: statistics.fmean(s.get(k, 0.0) for s in runs.split) for k in keys}


def ms(value: float) -> str:
    return f"{value * 1000:.2f}"


def table(results: list[Runs], limit: Runs) -> Table:
    """Throughput and CPU per retrieval of every contender."""
    out = Table(title="Retrievals per second (median, min–max over runs) and CPU per retrieval")
    for column in ("contender", "latency ms", "retrievals/s", "× limit", "CPU ms/retrieval"):
        out.add_column(column, justify="left" if column == "contender" else "right")
    out.add_column("of which site")
    out.add_column("machine busy", justify="right")
    for runs in [limit, *results]:
        cpu = statistics.fmean(runs.cpu_per) if runs.cpu_per else 0.0
        site = statistics.fmean(runs.site_cpu_per) if runs.site_cpu_per else 0.0
        ratio = runs.median / limit.median if limit.median else 0.0
        latency = "-" if runs.name == "limit" else label(runs.latency_ms)
        out.add_row(
            runs.name,
            latency,
            runs.spread(),
            f"{ratio:.2f}",
            ms(cpu + site),
            ms(site),
            runs.busy_cell(),
        )
    return out


def split_table(service: Runs) -> Table:
    """Where the service's CPU goes, per retrieval."""
    title = f"Service CPU per retrieval (ms), latency {label(service.latency_ms)} (ms)"
    out = Table(title=title)
    out.add_column("component")
    out.add_column("ms", justify="right")
    for name, value in mean_split(service).items():
        out.add_row(name, ms(value))
    return out


def summary(results: list[Runs], limit: Runs) -> dict[str, Any]:
    """The machine-readable line (first latency's figures; others suffixed `_at_<ms>ms`)."""
    latencies = list(dict.fromkeys(r.latency_ms for r in results))  # in the order measured
    by = {(r.name, r.latency_ms): r for r in results}
    line: dict[str, Any] = {"limit_rps": round(limit.median, 2), "limit_runs": limit.rps}
    limit_cpu = statistics.fmean(limit.cpu_per) if limit.cpu_per else 0.0
    line["limit_cpu_ms"] = round(limit_cpu * 1000, 3)
    for index, latency in enumerate(latencies):
        suffix = "" if index == 0 else f"_at_{label(latency)}" + ("" if latency == "mix" else "ms")
        for name in ("peer", "cli", "service"):
            runs = by.get((name, latency))
            if runs is None:
                continue
            line[f"{name}_rps{suffix}"] = round(runs.median, 2)
            line[f"{name}_runs{suffix}"] = [round(v, 2) for v in runs.rps]
            if runs.busy:
                line[f"{name}_machine_busy{suffix}"] = round(statistics.median(runs.busy), 3)
        service = by.get(("service", latency))
        if service is None:
            continue
        rps = service.median
        line[f"service_over_limit{suffix}"] = _ratio(rps, limit.median)
        for name in ("peer", "cli"):
            other = by.get((name, latency))
            line[f"service_over_{name}{suffix}"] = _ratio(rps, other.median if other else 0)
        split = mean_split(service)
        line[f"service_cpu_ms{suffix}"] = {k: round(v * 1000, 3) for k, v in split.items()}
        line[f"service_cpu_over_limit{suffix}"] = (
            _ratio(limit_cpu, split.get("total", 0.0)) if limit_cpu else None
        )
        line[f"worker_rss_mb{suffix}"] = service.extra.get("worker_rss_mb")
        line[f"worker_rss_growth_mb{suffix}"] = service.extra.get("worker_rss_growth_mb")
        line[f"worker_pss_total_mb{suffix}"] = service.extra.get("worker_pss_total_mb")
        line[f"in_flight_peak{suffix}"] = service.extra.get("in_flight_peak")
    if len(latencies) > 1:
        base, slow = latencies[0], latencies[-1]
        fast_rps = by[("service", base)].median if ("service", base) in by else 0
        slow_rps = by[("service", slow)].median if ("service", slow) in by else 0
        line["service_latency_ratio"] = _ratio(slow_rps, fast_rps)
    return line


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def emit(results: list[Runs], limit: Runs, console: Console | None = None) -> dict[str, Any]:
    """Print the tables, then the JSON line on stdout; return the line."""
    console = console or Console(stderr=True)
    console.print(table(results, limit))
    for runs in results:
        if runs.name == "service" and runs.split:
            console.print(split_table(runs))
    line = summary(results, limit)
    print(json.dumps(line), flush=True)
    return line
