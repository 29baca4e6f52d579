"""Overload: one workspace's pollers that ignore Retry-After, and its read flood, against a
second workspace's retrievals (issue 37), for two process sets side by side.

The process sets: `make-run` (the processes as deploy/Procfile starts them: its api, worker,
sweeper and beat lines, read from the file; Flower left out) and `cli-defaults` (bare
`evidence api` and `evidence worker`, no tuning flags, and beat). For each set, on a fresh
database, Redis and processes (`bench.load.serve`, write quotas lifted so that nothing is
refused for A's rate), two stacks in turn:

1. warm-up (`--warm-up` retrievals in workspace A, later the flood's targets), then
   * B idle: workspace B (its own key) POSTs one retrieval every `--b-every` s for `--b-idle`
     s and polls each every `--b-poll-gap` s until it settles: B's idle settle time and GETs;
   * flood: A GETs its settled retrievals open-loop at `--flood-rate` for `--flood-duration` s
     (`--client-processes` processes, `--flood-connections` connections), B as above;
   * unloaded: A POSTs at `--rate` for `--duration` s and does not poll; B as above;
2. warm-up, then loaded: A POSTs at `--rate` for `--duration` s and polls every open retrieval
   again as soon as each answer arrives, ignoring Retry-After, on `--poll-connections`
   connections of its own; B as above. A is two kinds of client process here, as a real
   client's writers would not share an event loop with hundreds of pollers: POSTers that only
   POST (their latency is A's POST figure) and append each created retrieval to a file
   (bench.id_file), and pollers that follow that file and poll each retrieval until it
   settles (`--client-processes` of each; the same rate, connections and poll gap in all);
3. with `--a-combined`, the loaded phase again on a fresh stack, each A process POSTing and
   polling what it POSTed (as before the split), so that both POST figures print side by side;
4. with `--pairs N`, N - 1 more pairs of an unloaded and a loaded phase, alternately, each on a
   fresh stack warmed up as above. The machine's speed drifts from minute to minute (the work
   a core does for one request moved by half between runs of one hour), and the settle ratio
   divides a phase's rate by another's taken minutes before: the pairs' ratios, POST p99s and
   B GET p99s are printed, and the targets take their medians (of an even N, the mean of the
   middle two: the lower one would flatter a latency and understate a ratio).

Settled/s is A's retrievals created and settled within the POST phase (the database's clocks)
over its length; the phase ends there (the backlog is not drained). B's settle time is
`settled_at - created_at`. The load clients are `python -m bench.load client` processes
(bench.lean_http, open-loop: each request leaves at its own time). It prints, per set: POST
and GET p50/p99 per workspace and phase, 429s by route, settled/s loaded vs unloaded, B's
settle time vs idle, the CPU of the machine and the service, the send and event-loop lag of
A's POSTers and pollers (a POSTer that lags its schedule times its own queueing), in the loaded
phases the API's own POST and GET p50/p99 (bucket bounds of its answer-time histogram, scraped
from /metrics before and after: a tail there is inside the service, not in a client or the
kernel), the issue's targets; a note when the machine ran slower than the reference one (the
test suite's measure of a core's speed, at the start: the load is fixed, the capacity is not);
then one JSON line.

Run: python -m bench.overload            (about 5 minutes: --duration 20 --flood-duration 10)
Full size (the issue's): python -m bench.overload --duration 30 --flood-duration 30
CPU share modes side by side: python -m bench.overload --sets make-run --cpu-shares weight,nice,idle
A's POSTs apart and beside its pollers: python -m bench.overload --a-combined
A verdict less at the machine's mercy: python -m bench.overload --pairs 3   (about 13 minutes)
Another API process count: python -m bench.overload --sets make-run --api-workers 4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.load import (  # noqa: E402
    GET,
    POST,
    CpuMeter,
    Served,
    _postmaster,
    _stop_on_sigterm,
    _warm_up,
    percentile,
    procfile_command,
    serve,
    summarize,
)

SETS = ("make-run", "cli-defaults")
CPU_COLUMNS = ("machine", "api", "worker", "postgres", "redis", "clients", "others")
# The targets (to be met after service changes; today's figures are the baseline).
TARGET_POST_P99_MS = 50.0
TARGET_B_GET_P99_MS = 100.0
TARGET_SETTLED_RATIO = 0.7
TARGET_FLOOD_B_RATIO = 2.0


def _without(words: list[str], *options: str) -> list[str]:
    """`words` less each of `options` and the value after it."""
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in options:
            skip = True
        else:
            out.append(word)
    return out


def commands(
    process_set: str, tmp: Path, cpu_share: str = "", api_workers: int = 0
) -> dict[str, list[str]]:
    """The `evidence` arguments of each process of `process_set` (the API's port is added);
    with `cpu_share`, the workers' `--cpu-share` is that (and the API's `weight` when it is
    `weight`, else `none`)."""
    beat = ["beat", "--schedule", str(tmp / "beat")]
    if process_set == "cli-defaults":
        found = {"api": ["api"], "worker": ["worker"], "beat": beat}
    else:
        found = {
            "api": _without(procfile_command("api"), "--host", "--port"),
            "worker": procfile_command("worker"),
            "sweeper": procfile_command("sweeper"),
            "beat": _without(procfile_command("beat"), "--schedule") + beat[1:],
        }
    if api_workers:
        found["api"] = [*_without(found["api"], "--workers"), "--workers", str(api_workers)]
    if cpu_share:
        api_share = "weight" if cpu_share == "weight" else "none"
        for name, words in found.items():
            if name != "beat":
                share = api_share if name == "api" else cpu_share
                found[name] = [*_without(words, "--cpu-share"), "--cpu-share", share]
    return found


@dataclass
class Client:
    """One load client: `python -m bench.load client` with these options."""

    name: str  # "A" or "B"
    key: str
    workspace: str
    rate: float
    duration: float
    stop_after: float
    options: list[str] = field(default_factory=list)
    processes: int = 1
    connections: int = 2
    role: str = ""  # "posts" or "polls": one side of A's split clients, reported on its own


def run_clients(served: Served, clients: list[Client], tag: str) -> dict[str, Any]:
    """Start `clients` together (their first request 3 s from now); wait for them; their merged
    records by name, the epoch of the first request and the CPU split of the phase."""
    start_at = time.time() + 3
    procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    roles_of: list[str] = []
    try:
        for client in clients:
            for n in range(client.processes):
                out = served.tmp / f"{tag}-{client.name}{client.role}-{n}.json"
                command = [
                    sys.executable, "-m", "bench.load", "client", "--api", served.api,
                    "--key", client.key, "--workspace", client.workspace, "--url", served.url,
                    "--urls", str(served.urls), "--rate", str(client.rate),
                    "--duration", str(client.duration),
                    "--stop-after", str(client.stop_after),
                    "--settle-timeout", str(client.stop_after),
                    "--connections", str(client.connections),
                    "--process-index", str(n), "--process-count", str(client.processes),
                    "--start-at", str(start_at), "--out", str(out), *client.options,
                ]  # fmt: skip
                proc = subprocess.Popen(command, cwd=ROOT, start_new_session=True)
                procs.append((client.name, proc, out))
                roles_of.append(client.role)
        pids = {name: proc.pid for name, proc in served.procs.items()}
        pids["page server"] = served.site_pid
        if served.redis_pid:
            pids["redis"] = served.redis_pid
        if postmaster := _postmaster():
            pids["postgres"] = postmaster
        meter = CpuMeter(pids)
        time.sleep(max(0.0, start_at - time.time()))
        meter.mark()
        window = max(c.duration for c in clients if c.name == "A" or len(clients) == 1)
        time.sleep(max(0.0, start_at + window - time.time()))
        meter.mark()
        for _, proc, _ in procs:
            if proc.wait(timeout=600) != 0:
                raise RuntimeError(f"a load client failed (exit {proc.returncode})")
    finally:
        for _, proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    parts: dict[str, list[dict[str, Any]]] = {}
    roles: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for (name, _, out), role in zip(procs, roles_of, strict=True):
        part = json.loads(out.read_text())
        parts.setdefault(name, []).append(part)
        if role:
            roles.setdefault((name, role), []).append(part)
    cpu = meter.between(0, 1)
    # A client's split processes merge into one summary (POSTs from one side, GETs from the
    # other); each side's own client figures (send and loop lag, CPU) are kept beside it.
    summaries = {name: summarize(p) for name, p in parts.items()}
    for (name, role), role_parts in roles.items():
        summaries[name].setdefault("roles", {})[role] = summarize(role_parts)["client"]
    cpu_pct = {k: v["pct"] for k, v in cpu.items() if k != "wall_s"}
    # "rest" is the load clients and whatever else ran: the machine is shared, and a phase in
    # which others took a core measured less than this service can do.
    cpu_pct["clients"] = round(
        sum(s["client"]["send_phase_cpu_pct_total"] for s in summaries.values()), 1
    )
    cpu_pct["others"] = round(cpu_pct["rest"] - cpu_pct["clients"], 1)
    return {"start_at": start_at, "window_s": window, **summaries, "cpu_pct": cpu_pct}


def server_buckets(api: str) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """The API's own answer-time histogram (`evidence_http_request_duration_seconds`, all its
    processes): cumulative (upper bound, count) pairs by (method, route template)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{api}/metrics", timeout=30).text
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "evidence_http_request_duration_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                key = (sample.labels["method"], sample.labels["route"])
                out.setdefault(key, []).append((float(sample.labels["le"]), sample.value))
    return {k: sorted(v) for k, v in out.items()}


def server_quantiles(
    before: dict[tuple[str, str], list[tuple[float, float]]],
    after: dict[tuple[str, str], list[tuple[float, float]]],
) -> dict[str, dict[str, float | None]]:
    """Per "METHOD route" answered between two scrapes: n, and the bucket bounds (ms) its p50
    and p99 fall under. The API's time runs from the request reaching the app to the last
    byte of the answer: what a client sees beyond it waited in the kernel, the server's
    accept and parse, or the client itself."""
    result: dict[str, dict[str, float | None]] = {}
    for key, buckets in after.items():
        earlier = dict(before.get(key, []))
        delta = [(le, n - earlier.get(le, 0.0)) for le, n in buckets]
        total = delta[-1][1] if delta else 0.0
        if total <= 0:
            continue

        result[f"{key[0]} {key[1]}"] = {
            "n": total,
            "p50_le_ms": _bound(delta, 0.5 * total),
            "p99_le_ms": _bound(delta, 0.99 * total),
        }
    return result


def _bound(delta: list[tuple[float, float]], count: float) -> float | None:
    """The first bucket bound (ms) holding `count` answers; None past the last finite one."""
    le = next(le for le, n in delta if n >= count)
    return None if le == float("inf") else round(le * 1000, 1)


def _query(db_url: str, sql: str, **params: Any) -> list[Any]:
    import sqlalchemy as sa

    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text(sql), params).all())
    finally:
        engine.dispose()


def settled_per_s(db_url: str, workspace: str, since: float, seconds: float) -> float:
    """Retrievals of `workspace` created and settled within `seconds` from `since`, per s."""
    ((n,),) = _query(
        db_url,
        "SELECT count(*) FROM retrieval WHERE workspace_id = :w"
        " AND created_at >= to_timestamp(:a) AND settled_at <= to_timestamp(:b)",
        w=workspace,
        a=since,
        b=since + seconds,
    )
    return round(int(n) / seconds, 1)


def settle_times(db_url: str, workspace: str, since: float, seconds: float) -> dict[str, Any]:
    """`settled_at - created_at` of `workspace`'s retrievals created within the window: p50,
    max, count; and how many had not settled when asked."""
    rows = _query(
        db_url,
        "SELECT extract(epoch FROM settled_at - created_at) FROM retrieval"
        " WHERE workspace_id = :w AND created_at >= to_timestamp(:a)"
        " AND created_at < to_timestamp(:b)",
        w=workspace,
        a=since,
        b=since + seconds,
    )
    times = [float(s) for (s,) in rows if s is not None]
    return {
        "n": len(times),
        "p50_s": round(percentile(times, 50), 3),
        "max_s": round(max(times, default=0.0), 3),
        "unsettled": len(rows) - len(times),
    }


def _routes(summary: dict[str, Any]) -> dict[str, Any]:
    """p50/p99 per route, requests per s, 429s by route, and what the client left undone."""
    out: dict[str, Any] = {}
    for route, key in ((POST, "post"), (GET, "get")):
        row = summary["routes"][route]
        if row["count"]:
            out[key] = {"n": row["count"], "p50_ms": row["p50_ms"], "p99_ms": row["p99_ms"]}
    out["http_429"] = {
        route: n for route in (POST, GET) if (n := summary["errors"].get(f"{route}: HTTP 429"))
    }
    out["errors"] = summary["errors"]
    out["abandoned"] = summary["abandoned"]
    out["send_lag_p99_ms"] = summary["client"]["send_lag_ms"]["p99"]
    out["loop_lag_p99_ms"] = summary["client"].get("loop_lag_ms", {}).get("p99")
    for role, client in summary.get("roles", {}).items():
        out[role] = {
            "send_lag_p99_ms": client["send_lag_ms"]["p99"],
            "loop_lag_p99_ms": client["loop_lag_ms"]["p99"],
            "cpu_pct": client["send_phase_cpu_pct_total"],
        }
    return out


def _b_client(args: argparse.Namespace, key: str, b: str, seconds: float) -> Client:
    """B: one retrieval every `--b-every` s, each polled every `--b-poll-gap` s until it settles."""
    b_gap = ["--poll-mode", "ignore", "--poll-gap", str(args.b_poll_gap)]
    return Client("B", key, b, 1 / args.b_every, seconds, seconds + args.b_grace, b_gap)


def measure_set(process_set: str, args: argparse.Namespace, cpu_share: str = "") -> dict[str, Any]:
    """Both stacks of one process set, then `--pairs` - 1 more unloaded and loaded phases
    (see the module's docstring)."""
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    tmp = Path(tempfile.mkdtemp(prefix=f"evidence-overload-{process_set}-"))
    result: dict[str, Any] = {"commands": commands(process_set, tmp, cpu_share, args.api_workers)}
    site = (args.log_level, args.site_nice, args.pages, args.hosts)
    try:
        with serve(tmp, result["commands"], *site) as served:
            key_a, key_b = served.create_key(a), served.create_key(b)
            _warm_up(served.api, key_a, a, served.url, args.warm_up)
            ids = [str(i) for (i,) in _query(served.db_url, _IDS, w=a)]
            (tmp / "ids.txt").write_text("\n".join(ids))
            print(f"{process_set}: B idle", file=sys.stderr)
            idle = run_clients(served, [_b_client(args, key_b, b, args.b_idle)], "idle")
            b_idle = settle_times(served.db_url, b, idle["start_at"], args.b_idle)
            result["idle"] = {"B": _routes(idle["B"]) | {"settle": b_idle}}
            print(f"{process_set}: flood {args.flood_rate:g} GET/s", file=sys.stderr)
            flood_a = Client(
                "A", key_a, a, args.flood_rate, args.flood_duration, args.flood_duration + 2,
                ["--get-ids", str(tmp / "ids.txt")], args.client_processes,
                max(1, args.flood_connections // args.client_processes),
            )  # fmt: skip
            b_side = _b_client(args, key_b, b, args.flood_duration)
            flood = run_clients(served, [flood_a, b_side], "flood")
            b_flood = settle_times(served.db_url, b, flood["start_at"], args.flood_duration)
            result["flood"] = {
                "A": _routes(flood["A"]),
                "A_get_per_s": round(flood["A"]["routes"][GET]["count"] / args.flood_duration),
                "B": _routes(flood["B"]) | {"settle": b_flood},
                "B_settle_ratio": _ratio(b_flood["p50_s"], b_idle["p50_s"]),
                "cpu_pct": flood["cpu_pct"],
            }
            print(f"{process_set}: unloaded {args.rate:g} POST/s, no polls", file=sys.stderr)
            result["unloaded"] = unloaded_phase(served, args, (key_a, key_b), (a, b), b_idle)
        for phase in ("loaded", "loaded-combined") if args.a_combined else ("loaded",):
            print(f"{process_set}: {phase}, pollers ignoring Retry-After", file=sys.stderr)
            result[phase] = loaded_phase(tmp, result["commands"], args, phase, (a, b), b_idle)
        # Further pairs, each phase on a fresh stack: the machine's speed drifts between phases
        # minutes apart, so one pair's ratio divides one noisy figure by another.
        pairs = [_pair(result["unloaded"], result["loaded"])]
        for n in range(2, args.pairs + 1):
            print(f"{process_set}: pair {n} of {args.pairs}", file=sys.stderr)
            with serve(tmp, result["commands"], *site) as served:
                keys = served.create_key(a), served.create_key(b)
                _warm_up(served.api, keys[0], a, served.url, args.warm_up)
                alone = unloaded_phase(served, args, keys, (a, b), b_idle)
            beside = loaded_phase(tmp, result["commands"], args, "loaded", (a, b), b_idle)
            pairs.append(_pair(alone, beside))
    finally:
        if args.keep:
            print(f"logs and client records kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    result["pairs"] = pairs
    result["settled_ratio"] = _median([p["settled_ratio"] for p in pairs])
    if args.a_combined:
        result["settled_ratio_combined"] = _ratio(
            result["loaded-combined"]["A_settled_per_s"], result["unloaded"]["A_settled_per_s"]
        )
    return result


def unloaded_phase(
    served: Served,
    args: argparse.Namespace,
    keys: tuple[str, str],
    workspaces: tuple[str, str],
    b_idle: dict[str, Any],
) -> dict[str, Any]:
    """A POSTs at `--rate` and does not poll, B beside it."""
    (key_a, key_b), (a, b) = keys, workspaces
    a_side = Client(
        "A", key_a, a, args.rate, args.duration, args.duration + 5, ["--poll-mode", "none"],
        args.client_processes, max(1, args.connections // args.client_processes),
    )  # fmt: skip
    got = run_clients(served, [a_side, _b_client(args, key_b, b, args.duration)], "unloaded")
    return _phase(served, got, a, b, b_idle)


def loaded_phase(
    tmp: Path,
    commands: dict[str, list[str]],
    args: argparse.Namespace,
    phase: str,
    workspaces: tuple[str, str],
    b_idle: dict[str, Any],
) -> dict[str, Any]:
    """On a fresh stack, once A has warmed it up: A POSTs at `--rate` and polls ignoring
    Retry-After, B beside it; with the API's own answer times over the phase."""
    a, b = workspaces
    site = (args.log_level, args.site_nice, args.pages, args.hosts)
    with serve(tmp, commands, *site) as served:
        key_a, key_b = served.create_key(a), served.create_key(b)
        _warm_up(served.api, key_a, a, served.url, args.warm_up)
        a_side = _a_loaded(args, key_a, a, tmp / f"{phase}-ids.txt", phase != "loaded")
        before = server_buckets(served.api)
        got = run_clients(served, [*a_side, _b_client(args, key_b, b, args.duration)], phase)
        figures = _phase(served, got, a, b, b_idle)
        figures["server"] = server_quantiles(before, server_buckets(served.api))
    return figures


def _pair(unloaded: dict[str, Any], loaded: dict[str, Any]) -> dict[str, Any]:
    """One unloaded and one loaded phase: A's settled/s in each and their ratio, the loaded
    phase's A POST p99, B GET p99 and A's GETs answered/s, the API's CPU in each."""
    return {
        "settled_per_s": [unloaded["A_settled_per_s"], loaded["A_settled_per_s"]],
        "settled_ratio": _ratio(loaded["A_settled_per_s"], unloaded["A_settled_per_s"]),
        "post_p99_ms": loaded["A"].get("post", {}).get("p99_ms"),
        "b_get_p99_ms": loaded["B"].get("get", {}).get("p99_ms"),
        "a_get_per_s": loaded["A_get_per_s"],
        "api_cpu_pct": [unloaded["cpu_pct"].get("api"), loaded["cpu_pct"].get("api")],
    }


def _median(values: list[float | None]) -> float | None:
    """The median of the known values; of an even count, the mean of the middle two (the
    lower one would be the better pair for a latency and the worse for a ratio)."""
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None


def _a_loaded(
    args: argparse.Namespace, key: str, workspace: str, ids: Path, combined: bool
) -> list[Client]:
    """A's clients in a loaded phase: `--rate` POST/s on `--connections`, and pollers that
    ignore Retry-After on `--poll-connections`, each side in `--client-processes` processes.

    Split (the default): POSTers that only POST and append each created retrieval to `ids`,
    and pollers that follow that file, so the POSTs are timed on an event loop of their own.
    Combined (`--a-combined`): each process POSTs and polls what it POSTed, as before.
    """
    n = args.client_processes
    ignore = ["--poll-mode", "ignore", "--poll-gap", str(args.poll_gap)]
    ignore += ["--poll-connections", str(args.poll_connections // n)]
    posts = max(1, args.connections // n)
    d = args.duration
    if combined:
        return [Client("A", key, workspace, args.rate, d, d, ignore, n, posts)]
    ids.write_text("")  # emptied: an earlier pair's ids, polled here, would all be 404s
    return [
        Client("A", key, workspace, args.rate, d, d, ["--poll-mode", "none", "--ids-out",
               str(ids)], n, posts, role="posts"),
        Client("A", key, workspace, args.rate, d, d, [*ignore, "--poll-ids", str(ids)], n, 1,
               role="polls"),
    ]  # fmt: skip


_IDS = "SELECT id FROM retrieval WHERE workspace_id = :w AND settled_at IS NOT NULL"


def _ratio(x: float, y: float) -> float | None:
    return round(x / y, 2) if y else None


def _phase(
    served: Served, got: dict[str, Any], a: str, b: str, b_idle: dict[str, Any]
) -> dict[str, Any]:
    """A POST phase's figures: A's and B's routes, settled/s, B's settle time vs idle."""
    since, window = got["start_at"], got["window_s"]
    b_settle = settle_times(served.db_url, b, since, window)
    return {
        "A": _routes(got["A"]),
        "A_get_per_s": round(got["A"]["routes"][GET]["count"] / window),
        "A_settled_per_s": settled_per_s(served.db_url, a, since, window),
        "B": _routes(got["B"]) | {"settle": b_settle},
        "B_settle_ratio": _ratio(b_settle["p50_s"], b_idle["p50_s"]),
        "cpu_pct": got["cpu_pct"],
    }


def targets(r: dict[str, Any]) -> dict[str, bool]:
    """The issue's targets, for one process set."""
    flood, pairs = r["flood"], r["pairs"]
    post_p99 = _median([p["post_p99_ms"] for p in pairs])
    b_get_p99 = _median([p["b_get_p99_ms"] for p in pairs])
    return {
        "post_p99_lt_50ms": (post_p99 or 1e9) < TARGET_POST_P99_MS,
        "b_get_p99_lt_100ms": (b_get_p99 or 1e9) < TARGET_B_GET_P99_MS,
        "settled_ge_70pct": (r["settled_ratio"] or 0) >= TARGET_SETTLED_RATIO,
        "flood_b_within_2x_idle": (flood["B_settle_ratio"] or 1e9) <= TARGET_FLOOD_B_RATIO
        and not flood["B"]["settle"]["unsettled"],
    }


# Where each loaded phase's A POSTs were timed (the table says which figure is which).
POST_TIMED = {
    "unloaded": "",
    "loaded": " (POSTer processes of their own)",
    "loaded-combined": " (timed beside A's pollers)",
}


def _side(figures: dict[str, Any] | None, send: bool = True) -> str:
    """One side of A's split clients: send lag (POSTers), loop lag, CPU % of a core."""
    if not figures:
        return "-"
    lags = f"{figures['send_lag_p99_ms']} / " if send else ""
    return f"{lags}{figures['loop_lag_p99_ms']}, {figures['cpu_pct']}"


def _server(server: dict[str, dict[str, Any]], method: str) -> str:
    """The API's own p50 / p99 bucket bounds for its retrieve POST or its retrieval GET."""
    route = next((k for k in server if k.startswith(method) and "/retriev" in k
                  and "batch" not in k and "cancel" not in k), None)  # fmt: skip
    if route is None:
        return "-"
    q = server[route]
    return f"{q['p50_le_ms'] or '>'} / {q['p99_le_ms'] or '>'}"


def show(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    def lat(row: dict[str, Any], key: str) -> str:
        got = row.get(key)
        return f"{got['p50_ms']} / {got['p99_ms']}" if got else "-"

    def settle(row: dict[str, Any], ratio: float | None = None) -> str:
        s = row["settle"]
        text = f"{s['p50_s']} s (max {s['max_s']}, n {s['n']}"
        text += f", {s['unsettled']} unsettled)" if s["unsettled"] else ")"
        return text + (f" x{ratio}" if ratio is not None else "")

    rows: list[tuple[str, ...]] = []
    combined = "loaded-combined" in next(iter(results.values()))
    phases = ("unloaded", "loaded", *(("loaded-combined",) if combined else ()))
    for phase in phases:
        rows.append((f"{phase}: A POST p50 / p99 ms{POST_TIMED[phase]}", *(
            lat(r[phase]["A"], "post") for r in results.values()
        )))  # fmt: skip
        if "server" in next(iter(results.values()))[phase]:
            rows.append((f"{phase}: the API's own POST, GET p50 / p99 <= ms (its histogram)", *(
                ", ".join(_server(r[phase]["server"], m) for m in ("POST", "GET"))
                for r in results.values()
            )))  # fmt: skip
        rows.append((f"{phase}: A GET p50 / p99 ms (GET/s)", *(
            f"{lat(r[phase]['A'], 'get')} ({r[phase]['A_get_per_s']})" for r in results.values()
        )))  # fmt: skip
        rows.append((f"{phase}: B POST, GET p50 / p99 ms", *(
            f"{lat(r[phase]['B'], 'post')}, {lat(r[phase]['B'], 'get')}"
            for r in results.values()
        )))  # fmt: skip
        rows.append((f"{phase}: B settle p50 (x idle)", *(
            settle(r[phase]["B"], r[phase]["B_settle_ratio"]) for r in results.values()
        )))  # fmt: skip
        rows.append((f"{phase}: A settled/s", *(
            str(r[phase]["A_settled_per_s"]) for r in results.values()
        )))  # fmt: skip
        rows.append((f"{phase}: 429s by route (A; B)", *(
            f"{r[phase]['A']['http_429'] or 0}; {r[phase]['B']['http_429'] or 0}"
            for r in results.values()
        )))  # fmt: skip
    pairs = len(next(iter(results.values()))["pairs"])
    if pairs > 1:
        rows.append(("pairs: A settled/s unloaded -> loaded (x), POST p99, B GET p99 ms", *(
            "; ".join(
                f"{p['settled_per_s'][0]} -> {p['settled_per_s'][1]} (x{p['settled_ratio']}),"
                f" {p['post_p99_ms']}, {p['b_get_p99_ms']}" for p in r["pairs"]
            ) for r in results.values()
        )))  # fmt: skip
    rows.append((f"settled/s loaded / unloaded{' (median of the pairs)' if pairs > 1 else ''}",
                 *(str(r["settled_ratio"]) for r in results.values())))  # fmt: skip
    if combined:
        rows.append(("settled/s loaded-combined / unloaded", *(
            str(r["settled_ratio_combined"]) for r in results.values()
        )))  # fmt: skip
    rows.append(("idle: B GET p50 / p99 ms", *(lat(r["idle"]["B"], "get") for r in
                 results.values())))  # fmt: skip
    rows.append(("idle: B settle p50", *(settle(r["idle"]["B"]) for r in results.values())))
    rows.append((f"flood: A GET/s answered (of {args.flood_rate:g})", *(
        f"{r['flood']['A_get_per_s']} ({r['flood']['A']['abandoned']} abandoned)"
        for r in results.values()
    )))  # fmt: skip
    rows.append(("flood: A GET p50 / p99 ms", *(lat(r["flood"]["A"], "get") for r in
                 results.values())))  # fmt: skip
    rows.append(("flood: B POST, GET p50 / p99 ms", *(
        f"{lat(r['flood']['B'], 'post')}, {lat(r['flood']['B'], 'get')}"
        for r in results.values()
    )))  # fmt: skip
    rows.append(("flood: B settle p50 (x idle)", *(
        settle(r["flood"]["B"], r["flood"]["B_settle_ratio"]) for r in results.values()
    )))  # fmt: skip
    rows.append(("flood: 429s by route (A; B)", *(
        f"{r['flood']['A']['http_429'] or 0}; {r['flood']['B']['http_429'] or 0}"
        for r in results.values()
    )))  # fmt: skip
    for phase in ("flood", *phases):
        rows.append((f"{phase}: CPU % machine / api / worker / pg / redis / clients / others", *(
            " / ".join(str(r[phase]["cpu_pct"].get(k, "-")) for k in CPU_COLUMNS)
            for r in results.values()
        )))  # fmt: skip
    rows.append(("loaded: A's POSTers send lag / loop lag p99 ms, CPU %", *(
        _side(r["loaded"]["A"].get("posts")) for r in results.values()
    )))  # fmt: skip
    rows.append(("loaded: A's pollers loop lag p99 ms, CPU %", *(
        _side(r["loaded"]["A"].get("polls"), send=False) for r in results.values()
    )))  # fmt: skip
    if combined:
        rows.append(("loaded-combined: A send lag / loop lag p99 ms", *(
            f"{r['loaded-combined']['A']['send_lag_p99_ms']} / "
            f"{r['loaded-combined']['A']['loop_lag_p99_ms']}" for r in results.values()
        )))  # fmt: skip
    rows.append(("flood: A send lag p99 ms", *(
        str(r["flood"]["A"]["send_lag_p99_ms"]) for r in results.values()
    )))  # fmt: skip
    rows.append(("targets met", *(
        ", ".join(k for k, ok in r["targets"].items() if ok) or "none" for r in results.values()
    )))  # fmt: skip
    table = Table(
        title=f"A: {args.rate:g} POST/s for {args.duration:g} s; pollers ignoring Retry-After on "
        f"{args.poll_connections} connections; flood {args.flood_rate:g} GET/s for "
        f"{args.flood_duration:g} s. B: one retrieval every {args.b_every:g} s, polled every "
        f"{args.b_poll_gap:g} s"
    )
    table.add_column("")
    for name in results:
        table.add_column(name)
    for row in rows:
        table.add_row(*row)
    console = Console(stderr=True, width=160)
    console.print(table)
    for name, r in results.items():
        lag = max(r[phase]["A"]["send_lag_p99_ms"] for phase in ("flood", *phases))
        others = max(r[phase]["cpu_pct"]["others"] for phase in ("flood", *phases))
        if others > 25:
            console.print(
                f"{name}: other processes on the machine took up to {others} % of a core in a"
                f" phase (load average {r['loadavg_before_after']} before/after): its figures are"
                " lower than this service alone gives",
                markup=False,
            )
        if lag > 20:
            console.print(
                f"{name}: A's load clients lagged their schedule (send lag p99 {lag} ms): the"
                " machine was saturated, and their rates and latencies include their own queueing",
                markup=False,
            )


#: A slowdown (tests.support.slowdown) from which the figures are flagged as a slow machine's.
SLOW_MACHINE = 1.5


def machine_slowdown() -> float:
    """How much slower than the reference machine this one is, before any load starts: the
    same 200 POST/s is twice the load on a machine twice as slow."""
    from tests.support import slowdown

    return slowdown.measure()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(SETS), help=f"some of {', '.join(SETS)}")
    parser.add_argument(
        "--cpu-shares",
        default="",
        help="each set once per worker --cpu-share given (weight,nice,idle,none), side by side;"
        " default: as each set's commands say",
    )
    parser.add_argument("--rate", type=float, default=200, help="A's POST/s")
    parser.add_argument("--duration", type=float, default=20, help="A's POST phase (s)")
    parser.add_argument("--poll-connections", type=int, default=256, help="A's pollers'")
    parser.add_argument("--poll-gap", type=float, default=0.0, help="A's pollers' wait (s)")
    parser.add_argument("--connections", type=int, default=128, help="A's POST connections")
    parser.add_argument("--flood-rate", type=float, default=1000, help="A's GET/s in the flood")
    parser.add_argument("--flood-duration", type=float, default=10)
    parser.add_argument("--flood-connections", type=int, default=256)
    parser.add_argument("--b-every", type=float, default=1.0, help="s between B's POSTs")
    parser.add_argument("--b-poll-gap", type=float, default=0.25, help="s between B's polls")
    parser.add_argument("--b-idle", type=float, default=10, help="B alone (s)")
    parser.add_argument(
        "--b-grace", type=float, default=30, help="B polls this long past a phase at most (s)"
    )
    parser.add_argument(
        "--client-processes",
        type=int,
        default=2,
        help="A's load clients (loaded: this many POSTers and this many pollers)",
    )
    parser.add_argument(
        "--a-combined",
        action="store_true",
        help="also a loaded phase (a fresh stack) with A's POSTs and polls in the same"
        " processes, as before: its POST latency includes the pollers' event-loop lag",
    )
    parser.add_argument("--warm-up", type=int, default=40, help="A's retrievals beforehand")
    parser.add_argument("--site-nice", type=int, default=10, help="the page server's nice")
    parser.add_argument("--pages", type=int, default=600, help="the fixture site's pages")
    parser.add_argument("--hosts", type=int, default=16, help="origins the pages are spread over")
    parser.add_argument(
        "--api-workers", type=int, default=0, help="the API's processes (default: the set's)"
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=1,
        help="unloaded and loaded phases this many times, alternately, each on a fresh stack;"
        " the targets take the pairs' medians (odd N: the middle pair's figures)",
    )
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--keep", action="store_true", help="keep the logs and client records")
    args = parser.parse_args()
    _stop_on_sigterm()
    started = time.time()
    slowdown = machine_slowdown()
    results = {}
    for process_set in args.sets.split(","):
        if process_set not in SETS:
            parser.error(f"unknown process set {process_set!r}")
        for share in args.cpu_shares.split(","):
            name = f"{process_set} {share}".strip()
            load_before = os.getloadavg()
            results[name] = measure_set(process_set, args, share)
            results[name]["loadavg_before_after"] = [
                round(load_before[0], 2),
                round(os.getloadavg()[0], 2),
            ]
            results[name]["targets"] = targets(results[name])
    show(results, args)
    if slowdown >= SLOW_MACHINE:
        print(
            f"this machine ran {slowdown} x slower than the reference one at the start (the test"
            " suite's measure): the load is the same, the capacity is not; compare figures taken"
            " at a like slowdown, or scale --rate down",
            file=sys.stderr,
        )
    options = {k: v for k, v in vars(args).items() if k not in ("keep", "log_level")}
    wall = round(time.time() - started)
    print(json.dumps({**options, "slowdown": slowdown, "wall_s": wall, "sets": results}))


if __name__ == "__main__":
    main()
