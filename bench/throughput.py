"""Throughput, side by side: the extraction-only limit, what a user would do, and the service.

Run: .venv/bin/python -m bench.throughput [--pages 1000] [--latency-ms 0,200] [--repeat 3]

Over the same URL list on a loopback HTTPS fixture site (bench.site):
  limit    trafilatura.extract over the pages already in memory, one process per core;
  peer     bench.peer_async: httpx (asyncio) downloads, the service's extraction in a process
           pool (`--peer-extract trafilatura`: trafilatura alone, as before the readability vote);
  cli      trafilatura's own batch mode, `trafilatura -i urls.txt` (bench.trafilatura_cli);
  service  `evidence enqueue --wait` through the API, Celery workers and PostgreSQL.
Prints a table (stderr) and one JSON line (stdout). Needs PostgreSQL (EVIDENCE_TEST_POSTGRES_URL,
default postgresql://postgres@127.0.0.1:5432/test) and redis-server on PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import certifi
from rich.console import Console

from bench import limit, procstat
from bench.pages import render
from bench.report import Runs, emit, label
from bench.service import Stack
from bench.site import parse_latency
from tests.support.services import ROOT, wait_for

CLI_CONFIG = """[DEFAULT]
DOWNLOAD_TIMEOUT = 30
MAX_FILE_SIZE = 20000000
MIN_FILE_SIZE = 10
SLEEP_TIME = 0
USER_AGENTS =
COOKIE =
MAX_REDIRECTS = 2
SSRF_PROTECTION = off
INSECURE_SSL_FALLBACK = off
MIN_EXTRACTED_SIZE = 250
MIN_OUTPUT_SIZE = 1
MIN_OUTPUT_COMM_SIZE = 1
MAX_TREE_SIZE =
EXTRACTION_TIMEOUT = 30
MIN_DUPLCHECK_SIZE = 100
MAX_REPETITIONS = 2
EXTENSIVE_DATE_SEARCH = on
EXTERNAL_URLS = off
"""
console = Console(stderr=True, width=120)


class Site:
    """The fixture site as a subprocess, with its URL list and CA files."""

    def __init__(
        self,
        tmp: Path,
        pages: int,
        hosts: int,
        latency_ms: float | str,
        extra: tuple[str, ...] = (),
    ) -> None:
        ready = tmp / f"site-{label(latency_ms)}.json"
        args = ["--pages", str(pages), "--hosts", str(hosts), "--latency-ms", str(latency_ms)]
        args += list(extra)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.site", *args, "--ready", str(ready)],
            cwd=ROOT,
            start_new_session=True,
        )
        wait_for(ready.exists, timeout=120, interval=0.2)
        time.sleep(0.2)
        self.info = json.loads(ready.read_text())
        port, names = self.info["port"], self.info["hosts"]
        self.urls = tmp / "urls.txt"
        lines = (f"https://{names[i % len(names)]}:{port}{render(i).path}" for i in range(pages))
        self.urls.write_text("\n".join(lines) + "\n")
        self.bundle = tmp / "bundle.pem"
        self.bundle.write_bytes(
            Path(certifi.where()).read_bytes() + Path(self.info["ca"]).read_bytes()
        )

    def cpu(self) -> float:
        return procstat.cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def timed_child(
    args: list[str], env: dict[str, str] | None = None, runs: Runs | None = None
) -> tuple[float, float, str]:
    """Run a command: (wall seconds, CPU seconds of it and its reaped children, stdout); the
    machine's busy share over its whole run (start-up included) goes to `runs`."""
    machine = procstat.machine_cpu()
    started = time.perf_counter()
    proc = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if runs is not None:
        runs.busy.append(procstat.busy_share(procstat.machine_cpu() - machine, seconds))
    return seconds, usage.ru_utime + usage.ru_stime, out


def run_peer(site: Site, runs: Runs, pages: int, extract: str = "service") -> None:
    """One run of the asyncio + process pool script."""
    before = site.cpu()
    args = [sys.executable, "-m", "bench.peer_async", str(site.urls), "--ca", site.info["ca"]]
    args += ["--extract", extract]
    _, cpu, out = timed_child(args, runs=runs)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["ok"] == pages, f"peer extracted {result['ok']} of {pages}"
    runs.rps.append(result["rps"])
    runs.cpu_per.append(cpu / pages)
    runs.site_cpu_per.append((site.cpu() - before) / pages)


def run_cli(site: Site, runs: Runs, pages: int, tmp: Path) -> None:
    """One run of `trafilatura -i urls.txt` (threads download, the main process extracts)."""
    config = tmp / "trafilatura.cfg"
    config.write_text(CLI_CONFIG)
    before = site.cpu()
    args = [sys.executable, "-m", "bench.trafilatura_cli", "-i", str(site.urls)]
    args += ["--config-file", str(config), "--parallel", str(os.cpu_count())]
    args += ["--precision", "--fast", "--no-comments"]  # the service's extraction options
    env = os.environ | {"BENCH_CA_BUNDLE": str(site.bundle)}
    seconds, cpu, out = timed_child(args, env, runs)
    runs.rps.append(pages / seconds)
    runs.cpu_per.append(cpu / pages)
    runs.site_cpu_per.append((site.cpu() - before) / pages)
    runs.extra["output_lines"] = out.count("\n")


def run_service(stack: Stack, site: Site, runs: Runs, pages: int, poll: float) -> None:
    """One `evidence enqueue --wait` batch into a fresh workspace."""
    before = site.cpu()
    batch = stack.run_batch(site.urls, poll, 0.0)
    site_cpu = site.cpu() - before
    assert batch.pages == pages, f"service settled {batch.pages} of {pages}: {batch.states}"
    runs.rps.append(pages / batch.seconds)
    probe, cpu = batch.probe, batch.cpu
    runs.busy.append(batch.busy)
    tasks_cpu = probe.get("task", 0.0)
    pool_cpu = cpu.get("extract_pool", 0.0)  # a threads-pool worker's extraction processes
    worker_other = cpu.get("worker", 0.0) - tasks_cpu - pool_cpu
    split = {
        "fetch (guarded, robots, politeness)": probe.get("fetch", 0.0),
        "  of which Redis calls": probe.get("redis", 0.0),
        "extract": probe.get("extract", 0.0) + pool_cpu,
        "worker: database": probe.get("db", 0.0),
        "worker: rest of task": tasks_cpu
        - sum(probe.get(k, 0.0) for k in ("fetch", "extract", "db")),
        "worker: celery outside tasks": worker_other,
        "api": cpu.get("api", 0.0),
        "beat": cpu.get("beat", 0.0),
        "redis-server": cpu.get("redis", 0.0),
        "postgres": cpu.get("postgres", 0.0),
    }
    split["bookkeeping (all but fetch, extract)"] = sum(
        v for k, v in split.items() if not k.startswith(("fetch", "extract", "  "))
    )
    split["total"] = split["bookkeeping (all but fetch, extract)"] + split["extract"]
    split["total"] += split["fetch (guarded, robots, politeness)"]
    split["site (fixture, not counted)"] = site_cpu
    split["enqueue client (not counted)"] = cpu.get("client", 0.0)
    runs.split.append({k: v / pages for k, v in split.items()})
    runs.cpu_per.append(split["total"] / pages)
    runs.site_cpu_per.append(site_cpu / pages)
    samples = batch.rss.samples
    head = samples[: max(1, len(samples) // 5)]
    tail = samples[-max(1, len(samples) // 5) :]
    growth = max(s[1] for s in tail) - max(s[1] for s in head)
    runs.extra["worker_rss_mb"] = round(
        max(runs.extra.get("worker_rss_mb", 0), batch.rss.peak_rss), 1
    )
    runs.extra["worker_pss_total_mb"] = round(
        max(runs.extra.get("worker_pss_total_mb", 0), batch.rss.peak_pss_total), 1
    )
    runs.extra["in_flight_peak"] = max(runs.extra.get("in_flight_peak", 0), batch.in_flight)
    runs.extra["worker_rss_growth_mb"] = round(growth, 1)
    runs.extra.setdefault("client_seconds", []).append(round(batch.client_seconds, 2))
    runs.extra.setdefault("ready", []).append(batch.ready)


def main() -> None:
    """Parse options, measure everything, print the table and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument(
        "--latency-ms", default="0", help="comma-separated, e.g. 0,200,mix (bench.site)"
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--hosts", type=int, default=16, help="sites the URLs are spread over")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="worker --concurrency (default: the worker's own default)",
    )
    parser.add_argument("--pool", default=None, help="worker --pool: threads (default) or prefork")
    parser.add_argument("--client-concurrency", type=int, default=16, help="enqueue requests")
    parser.add_argument("--poll-interval", type=float, default=3.0)
    parser.add_argument("--only", default="limit,peer,cli,service")
    parser.add_argument(
        "--peer-extract",
        choices=["service", "trafilatura"],
        default="service",
        help="the peer's extraction: the service's own (default), or trafilatura alone",
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    latencies = [parse_latency(v) for v in args.latency_ms.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="evidence-bench-"))
    limit_runs = Runs("limit", 0.0)
    if "limit" in only:
        for _ in range(args.repeat):
            rps, cpu = limit.measure(args.pages)
            limit_runs.rps.append(rps)
            limit_runs.cpu_per.append(cpu)
            console.log(f"limit: {rps:.1f} retrievals/s")
    results: list[Runs] = []
    for latency in latencies:
        results += measure_latency(args, tmp, latency, only)
    emit(results, limit_runs, console)


def measure_latency(
    args: argparse.Namespace, tmp: Path, latency: float | str, only: set[str]
) -> list[Runs]:
    """Peer, CLI and service at one simulated latency, interleaved run by run."""
    site = Site(tmp, args.pages, args.hosts, latency)
    peer, cli, service = (Runs(name, latency) for name in ("peer", "cli", "service"))
    stack: Stack | None = None
    try:
        stack = (
            Stack(tmp, site.info, args.concurrency, args.client_concurrency, args.pool).start()
            if "service" in only
            else None
        )
        if stack is not None:
            warm = tmp / "warm.txt"
            warm.write_text("".join(site.urls.read_text().splitlines(True)[:100]))
            stack.run_batch(warm, 1.0, 0.0)
        for round_ in range(args.repeat):
            if "peer" in only:
                run_peer(site, peer, args.pages, args.peer_extract)
            if "cli" in only:
                run_cli(site, cli, args.pages, tmp)
            if stack is not None:
                run_service(stack, site, service, args.pages, args.poll_interval)
            console.log(
                f"latency {label(latency)}, round {round_ + 1}: peer {peer.rps[-1:]}, "
                f"cli {cli.rps[-1:]}, service {service.rps[-1:]}"
            )
    finally:
        if stack is not None:
            stack.stop()
        site.stop()
    return [r for r in (peer, cli, service) if r.rps]


if __name__ == "__main__":
    main()
