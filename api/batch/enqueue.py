"""The `evidence enqueue` client: submit a file of URLs through the HTTP API, optionally wait.

Entries stream from the input (`api.batch.input`) to `concurrency` worker tasks that share one
iterator, so a 10 000-line file never holds more than `concurrency` requests or coroutines. Each
line is POSTed with its deterministic mutation_id: re-running a file after a crash or Ctrl-C gets
200 for what the server already has and creates only the rest. With `wait`, a second phase polls
`GET .../retrievals/{id}` in rounds (same bound; the interval grows 1.5x per round up to 15 s,
and a retrieval is not asked again before its last answer's `Retry-After` has passed) until
every retrieval is settled or `timeout` seconds pass. How answers are retried:
`api.batch.http`; the out file and the summary: `api.batch.report`.

Exit codes (the policy: "did every line get into the service?", not "did every fetch work?"):
    0    every entry was valid and submitted (created or already known), whatever the results
         (unavailable, blocked, still unsettled when `timeout` ran out, 404 while polling);
    1    some entry was invalid, rejected or failed to submit: fix it or re-run to resume;
    2    usage or auth error (bad options, unreadable input, CSV without `url`, 401/403);
    130  interrupted (Ctrl-C): re-run the same command to resume.
Progress, per-line problems and the closing summary go to `console` (stderr by default).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar
from uuid import UUID

import httpx
from rich.console import Console

from api.batch.http import (
    AUTH_STATUSES,
    RETRY_STATUSES,
    AuthError,
    RetryPolicy,
    auth_message,
    backoff_delay,
    error_of,
    parse_retry_after,
    retrieval_of,
)
from api.batch.input import (
    STDIN,
    InputError,
    Line,
    LineError,
    check_kind,
    check_language,
    mutation_id,
    read_input,
)
from api.batch.report import EXIT_INTERRUPTED, EXIT_USAGE, Report, Tally, exit_code, summary_table

DEFAULT_API_URL = "http://127.0.0.1:8000"
DEFAULT_CONCURRENCY = 8
RETRIEVE_PATH = "/research-api/evidence/retrieve"
RETRIEVAL_PATH = "/research-api/evidence/retrievals/{id}"
UNSETTLED_STATES = frozenset({"pending", "running"})
REQUEST_TIMEOUT = httpx.Timeout(30.0, connect=10.0)
POLL_BACKOFF = 1.5  # each poll round waits 1.5x longer than the last...
MAX_POLL_INTERVAL = 15.0  # ...up to 15 s (or poll_interval, if larger)
PLAIN_PROGRESS_SECONDS = 5.0  # how often a non-terminal console gets a progress line
T = TypeVar("T")


@dataclass
class EnqueueOptions:
    """Everything `evidence enqueue` was asked to do."""

    file: str
    workspace: UUID
    kind: str
    language: str | None
    api: str
    key: str
    concurrency: int
    wait: bool
    out: Path | None
    batch: str | None
    poll_interval: float = 1.0
    timeout: float | None = None  # give up waiting after this many seconds; count unsettled
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    console: Console | None = None


def validate_options(options: EnqueueOptions) -> str | None:
    """Return what is wrong with `options` as a usage error, or None."""
    if options.file != STDIN and not Path(options.file).is_file():
        return f"no such file: {options.file}"
    if not options.key:
        return "no API key: pass --key or set EVIDENCE_API_KEY"
    if not options.api.startswith(("http://", "https://")):
        return f"--api must be an http(s) URL, got {options.api!r}"
    if options.concurrency < 1:
        return "--concurrency must be at least 1"
    if options.poll_interval <= 0 or (options.timeout is not None and options.timeout < 0):
        return "the poll interval must be positive and the timeout not negative"
    problem = check_kind(options.kind)
    if problem is None and options.language is not None:
        problem = check_language(options.language)
    return problem


async def drain(items: Iterable[T], work: Callable[[T], Awaitable[None]], workers: int) -> None:
    """Run `work` on every item with at most `workers` in flight; re-raise the first failure."""
    shared = iter(items)

    async def worker() -> None:
        for item in shared:  # each next() hands one item to exactly one worker
            await work(item)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(workers):
                group.create_task(worker())
    except BaseExceptionGroup as failures:
        raise failures.exceptions[0] from None


@dataclass
class Pending:
    """A submitted line and the latest view of its retrieval."""

    line: Line
    mutation_id: str
    retrieval: dict[str, Any]
    done: bool = False
    not_before: float = 0.0  # the API's Retry-After: not polled again before this (loop time)


class Batch:
    """One run of the enqueue command: submit every line, then optionally wait."""

    def __init__(self, options: EnqueueOptions, console: Console, tally: Tally) -> None:
        self.options, self.console, self.tally = options, console, tally
        self.report = Report(console, tally)
        self.note, self.write, self.refresh = (
            self.report.note,
            self.report.write,
            self.report.refresh,
        )
        self.waiting: list[Pending] = []

    async def run(self, client: httpx.AsyncClient, out: IO[str] | None) -> None:
        """Submit every entry of the input, then wait for settlement if asked to."""
        self.client, self.report.out, o = client, out, self.options
        ticker = None
        if not self.console.is_terminal:
            ticker = asyncio.create_task(self.report.tick(PLAIN_PROGRESS_SECONDS))
        try:
            with self.report.progress:
                await drain(read_input(o.file, o.kind, o.language), self.submit, o.concurrency)
                if self.waiting:
                    await self.wait_all()
        finally:
            if ticker is not None:
                ticker.cancel()
            self.note(self.tally.line())

    async def submit(self, entry: Line | LineError) -> None:
        """Submit one entry, or report it as invalid, and record the outcome."""
        self.tally.read += 1
        if isinstance(entry, LineError):
            self.tally.invalid += 1
            self.note(f"line {entry.number}: invalid: {entry.message}")
            error = {"code": "invalid_line", "message": entry.message}
            self.write({"line": entry.number, "url": None, "error": error})
            return
        o = self.options
        mid = str(mutation_id(o.workspace, entry.kind, entry.language, entry.url, o.batch))
        body = {"url": entry.url, "kind": entry.kind, "workspace_id": str(o.workspace)}
        body |= {"mutation_id": mid} | ({"language": entry.language} if entry.language else {})
        outcome, answer = await self.post(body)
        setattr(self.tally, outcome, getattr(self.tally, outcome) + 1)
        pending = Pending(entry, mid, answer)
        if outcome in ("rejected", "gave_up"):
            self.note(f"line {entry.number}: not submitted: {answer.get('message')} ({entry.url})")
            self.write(
                {"line": entry.number, "url": entry.url, "mutation_id": mid, "error": answer}
            )
        elif o.wait and answer.get("state") in UNSETTLED_STATES:
            self.waiting.append(pending)
        else:
            self.finish(pending)
        self.refresh()

    async def post(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """POST one line, retrying transient failures: (outcome, retrieval or error)."""
        policy = self.options.retry
        error: dict[str, Any] = {}
        for attempt in range(1, policy.attempts + 1):
            retry_after = None
            try:
                response = await self.client.post(RETRIEVE_PATH, json=body)
            except httpx.TransportError as exc:
                error = {"code": "transport_error", "message": f"{type(exc).__name__}: {exc}"}
            else:
                status = response.status_code
                retrieval = retrieval_of(response) if status in (200, 202) else None
                if retrieval is not None:
                    return ("created" if status == 202 else "known"), retrieval
                if status in AUTH_STATUSES:
                    raise AuthError(auth_message(response))
                error = error_of(response)
                if status not in RETRY_STATUSES:
                    return "rejected", error
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
            if attempt < policy.attempts:
                await asyncio.sleep(backoff_delay(policy, attempt, retry_after))
        error["message"] = f"{error.get('message')} (gave up after {policy.attempts} attempts)"
        return "gave_up", error

    async def wait_all(self) -> None:
        """Poll unsettled retrievals in rounds until all settle or the timeout passes."""
        o, loop = self.options, asyncio.get_running_loop()
        deadline = None if o.timeout is None else loop.time() + o.timeout
        interval = o.poll_interval
        self.report.waiting_for(self.tally.settled + len(self.waiting))
        while self.waiting and (deadline is None or loop.time() < deadline):
            last = deadline is not None and deadline - loop.time() <= interval
            await asyncio.sleep(
                interval if deadline is None else min(interval, deadline - loop.time())
            )
            await self.poll_round(full=last)
            self.waiting = [pending for pending in self.waiting if not pending.done]
            interval = min(interval * POLL_BACKOFF, max(MAX_POLL_INTERVAL, o.poll_interval))
        self.tally.unsettled += len(self.waiting)
        for pending in self.waiting:
            self.finish(pending)

    async def poll_round(self, full: bool) -> None:
        """Poll the oldest first, `concurrency` at a time, up to a group where none settled.

        Workers take retrievals in submission order, so the ones after such a group have not
        settled either: a round costs the settled ones plus one group, not every line again.
        A line whose last answer said `Retry-After` waits that long. The round before the
        timeout (`full`) polls every line.
        """
        size, now = self.options.concurrency, asyncio.get_running_loop().time()
        waiting = [pending for pending in self.waiting if full or pending.not_before <= now]
        for start in range(0, len(waiting), size):
            group = waiting[start : start + size]
            await drain(group, self.poll, size)
            if not full and not any(pending.done for pending in group):
                return

    async def poll(self, pending: Pending) -> None:
        """GET one retrieval; settle it, or leave it for the next round on a transient error."""
        try:
            response = await self.client.get(RETRIEVAL_PATH.format(id=pending.retrieval["id"]))
        except httpx.TransportError:
            return
        if response.status_code in AUTH_STATUSES:
            raise AuthError(auth_message(response))
        retrieval = retrieval_of(response) if response.status_code == 200 else None
        if response.status_code == 404:
            self.tally.lost, pending.done, line = self.tally.lost + 1, True, pending.line
            self.note(f"line {line.number}: retrieval {pending.retrieval['id']} not found")
            record = {"line": line.number, "url": line.url, "mutation_id": pending.mutation_id}
            self.write(record | {"error": error_of(response)})
        elif retrieval is not None:
            pending.retrieval = retrieval
            if retrieval.get("state") not in UNSETTLED_STATES:
                self.finish(pending)
            elif (wait := parse_retry_after(response.headers.get("Retry-After"))) is not None:
                wait = min(wait, self.options.retry.max_retry_after)
                pending.not_before = asyncio.get_running_loop().time() + wait

    def finish(self, pending: Pending) -> None:
        """Count and write a line's final (or last known) retrieval."""
        pending.done, retrieval = True, pending.retrieval
        self.tally.count(retrieval)
        self.tally.settled += retrieval.get("state") not in UNSETTLED_STATES
        record = {"line": pending.line.number, "url": pending.line.url}
        self.write(record | {"mutation_id": pending.mutation_id, "retrieval": retrieval})
        self.refresh()


async def enqueue_batch(options: EnqueueOptions, console: Console, tally: Tally) -> None:
    """Run one batch against the API, counting into `tally` (options assumed validated)."""
    headers = {"Authorization": f"Bearer {options.key}", "User-Agent": "evidence-enqueue/1"}
    limits = httpx.Limits(max_connections=options.concurrency)
    batch = Batch(options, console, tally)
    async with httpx.AsyncClient(
        base_url=options.api.rstrip("/"), headers=headers, limits=limits, timeout=REQUEST_TIMEOUT
    ) as client:
        if options.out is None:
            return await batch.run(client, None)
        with open(options.out, "w", encoding="utf-8", buffering=1) as out:
            return await batch.run(client, out)


def run_enqueue(options: EnqueueOptions) -> int:
    """Run `evidence enqueue` and return its exit code (see the module docstring)."""
    console = options.console or Console(stderr=True)
    problem = validate_options(options)
    if problem is not None:
        console.print(f"error: {problem}", markup=False)
        return EXIT_USAGE
    tally = Tally()
    try:
        asyncio.run(enqueue_batch(options, console, tally))
    except KeyboardInterrupt:
        console.print("interrupted: re-run the same command to resume", markup=False)
        code = EXIT_INTERRUPTED
    except AuthError as exc:
        console.print(f"error: {exc}", markup=False)
        return EXIT_USAGE
    except (InputError, OSError) as exc:
        console.print(f"error: cannot read the input or write the output: {exc}", markup=False)
        return EXIT_USAGE
    else:
        code = exit_code(tally)
    console.print(summary_table(tally, options.wait))
    return code
