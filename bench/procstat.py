"""CPU time and memory of process trees, read from /proc (Linux)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

TICKS = os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """Direct children of `pid` (started by any of its threads)."""
    out: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as handle:
                out += [int(p) for p in handle.read().split()]
        except OSError:
            continue
    return out


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children(current))
    return out


def cmdline(pid: int) -> str:
    """The command line of `pid` ("" when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def forkserver_trees(pid: int) -> list[int]:
    """Every process under `pid` that belongs to a multiprocessing fork server's tree (the
    threads-pool worker's extraction processes and their server)."""
    # Its processes are forked from it, so they carry its command line too: count each once.
    servers = [p for p in tree(pid) if "forkserver" in cmdline(p)]
    return list(dict.fromkeys(p for server in servers for p in tree(server)))


def cpu_seconds(pid: int, *, reaped: bool = True) -> float:
    """User + system CPU of `pid` (plus its reaped children's, when `reaped`)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICKS


def tree_cpu(pid: int) -> float:
    """CPU seconds of a whole live process tree (and what its members reaped)."""
    return sum(cpu_seconds(p) for p in tree(pid))


def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot (all cores)."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / TICKS


def busy_share(machine_cpu_seconds: float, seconds: float) -> float:
    """The share of the machine's cores busy over `seconds` of wall time, given the busy CPU
    seconds `machine_cpu` advanced by meanwhile."""
    return machine_cpu_seconds / (seconds * (os.cpu_count() or 1)) if seconds > 0 else 0.0


def memory_mb(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of `pid` in MiB; zeros when it is gone."""
    rss = pss = 0.0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) / 1024
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) / 1024
    except OSError:
        pass
    return rss, pss


@dataclass
class MemorySampler:
    """Samples the RSS of every process of some trees in a background thread."""

    roots: list[int]
    interval: float = 0.5
    peak_rss: float = 0.0  # largest single process seen
    peak_pss_total: float = 0.0  # largest sum of PSS over the trees
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # (t, max rss, pss)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> tuple[float, float]:
        """One sample: (largest RSS, total PSS)."""
        pids = [p for root in self.roots for p in tree(root)]
        readings = [memory_mb(p) for p in pids]
        top = max((r for r, _ in readings), default=0.0)
        total = sum(p for _, p in readings)
        self.peak_rss, self.peak_pss_total = (
            max(self.peak_rss, top),
            max(self.peak_pss_total, total),
        )
        self.samples.append((time.monotonic(), top, total))
        return top, total

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> MemorySampler:
        """Start sampling."""
        self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (takes one last sample)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
