"""The `evidence enqueue` client: submit a file of URLs through the HTTP API, optionally wait.

Entries stream from the input (`api.enqueue_input`) to `concurrency` worker tasks that share one
iterator, so a 10 000-line file never holds more than `concurrency` requests or coroutines. Each
line is POSTed with its deterministic mutation_id: re-running a file after a crash or Ctrl-C gets
200 for what the server already has and creates only the rest. With `wait`, a second phase polls
`GET .../retrievals/{id}` in rounds (same bound; the interval grows 1.5x per round up to 15 s)
until every retrieval is settled or `timeout` seconds pass.

Answers: 202/200 submitted. 401/403 stop the batch (the key is wrong; nothing else will work).
503 (and 429/500/502/504, which proxies also send) and transport errors (connect, read, timeouts,
dropped connections) are retried with capped exponential back-off, full jitter and at least
Retry-After, then the line counts as failed to submit; retrying a POST is safe because the server
deduplicates on the mutation_id. Any other answer (400/409/422...) rejects that line only.

The out file gets one JSON line per entry (blank and comment lines are not entries), in the order
entries finish, each carrying its `line` number: `{"line", "url", "mutation_id", "retrieval"}` or
`{"line", "url", ["mutation_id"], "error"}`. Without `wait` the retrieval is the POST's answer.

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
import json
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import IO, Any, TypeVar
from uuid import UUID

import httpx
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from api.enqueue_input import (
    STDIN,
    InputError,
    Line,
    LineError,
    check_kind,
    check_language,
    mutation_id,
    read_input,
)

DEFAULT_API_URL = "http://127.0.0.1:8000"
DEFAULT_CONCURRENCY = 8
RETRIEVE_PATH = "/research-api/evidence/retrieve"
RETRIEVAL_PATH = "/research-api/evidence/retrievals/{id}"
UNSETTLED_STATES = frozenset({"pending", "running"})
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
AUTH_STATUSES = frozenset({401, 403})
REQUEST_TIMEOUT = httpx.Timeout(30.0, connect=10.0)
POLL_BACKOFF = 1.5  # each poll round waits 1.5x longer than the last...
MAX_POLL_INTERVAL = 15.0  # ...up to 15 s (or poll_interval, if larger)
PLAIN_PROGRESS_SECONDS = 5.0  # how often a non-terminal console gets a progress line
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a transient failure is retried."""

    attempts: int = 5
    base_delay: float = 0.5  # seconds before the 2nd attempt, doubling after
    max_delay: float = 30.0
    max_retry_after: float = 60.0  # a longer Retry-After is capped here to keep runs bounded


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


class AuthError(Exception):
    """Raised when the API refuses the key (401/403): the batch cannot go on."""


@dataclass
class Tally:
    """Counts for the progress line, the summary table and the exit code."""

    read: int = 0
    invalid: int = 0
    created: int = 0
    known: int = 0
    rejected: int = 0
    gave_up: int = 0
    settled: int = 0
    unsettled: int = 0
    lost: int = 0
    states: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def count(self, retrieval: dict[str, Any]) -> None:
        """Count one retrieval's final state, result status and reason."""
        self.states[str(retrieval.get("state"))] += 1
        result = retrieval.get("result") or {}
        if result:
            self.statuses[str(result.get("status"))] += 1
            self.reasons[str(result.get("reason") or "-")] += 1

    def line(self) -> str:
        """Render the one-line progress text."""
        return (
            f"submitted {self.created + self.known} (created {self.created}, known {self.known})"
            f" | failed {self.rejected + self.gave_up} | invalid {self.invalid}"
            f" | settled {self.settled}"
        )


def exit_code(tally: Tally) -> int:
    """Map a finished batch to its exit code (see the module docstring)."""
    return EXIT_FAILED if tally.invalid or tally.rejected or tally.gave_up else EXIT_OK


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


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Read a Retry-After header (seconds or an HTTP date) as seconds from now."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def backoff_delay(
    policy: RetryPolicy,
    attempt: int,
    retry_after: float | None,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to sleep after failed `attempt` (1-based): full jitter, at least Retry-After."""
    ceiling = min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))
    delay = ceiling * rand()
    if retry_after is not None:
        delay = max(delay, min(retry_after, policy.max_retry_after))
    return delay


def error_of(response: httpx.Response) -> dict[str, Any]:
    """Take the error envelope from `response`, or make one from its status."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if not isinstance(error, dict):
        error = {"code": f"http_{response.status_code}", "message": response.text[:200]}
    return {**error, "http_status": response.status_code}


def retrieval_of(response: httpx.Response) -> dict[str, Any] | None:
    """Take the retrieval from a 200/202 body (`{"retrieval": ...}` or the bare object)."""
    try:
        body = response.json()
    except ValueError:
        return None
    if isinstance(body, dict) and isinstance(body.get("retrieval"), dict):
        return dict(body["retrieval"])
    return dict(body) if isinstance(body, dict) and "state" in body else None


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


class Batch:
    """One run of the enqueue command: submit every line, then optionally wait."""

    def __init__(self, options: EnqueueOptions, console: Console, tally: Tally) -> None:
        self.options, self.console, self.tally = options, console, tally
        self.out: IO[str] | None = None
        self.waiting: list[Pending] = []
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn())
        self.progress = Progress(
            *columns, TimeElapsedColumn(), console=console, disable=not console.is_terminal
        )
        self.task = self.progress.add_task(tally.line(), total=None)

    async def run(self, client: httpx.AsyncClient, out: IO[str] | None) -> None:
        """Submit every entry of the input, then wait for settlement if asked to."""
        self.client, self.out, o = client, out, self.options
        ticker = None if self.console.is_terminal else asyncio.create_task(self.tick())
        try:
            with self.progress:
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
        total = self.tally.settled + len(self.waiting)
        self.progress.update(self.task, total=total, completed=self.tally.settled)
        while self.waiting and (deadline is None or loop.time() < deadline):
            await asyncio.sleep(
                interval if deadline is None else min(interval, deadline - loop.time())
            )
            await drain(list(self.waiting), self.poll, o.concurrency)
            self.waiting = [pending for pending in self.waiting if not pending.done]
            interval = min(interval * POLL_BACKOFF, max(MAX_POLL_INTERVAL, o.poll_interval))
        self.tally.unsettled += len(self.waiting)
        for pending in self.waiting:
            self.finish(pending)

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

    def finish(self, pending: Pending) -> None:
        """Count and write a line's final (or last known) retrieval."""
        pending.done, retrieval = True, pending.retrieval
        self.tally.count(retrieval)
        self.tally.settled += retrieval.get("state") not in UNSETTLED_STATES
        record = {"line": pending.line.number, "url": pending.line.url}
        self.write(record | {"mutation_id": pending.mutation_id, "retrieval": retrieval})
        self.refresh()

    def write(self, record: dict[str, Any]) -> None:
        """Append one JSON line to the out file, if any."""
        if self.out is not None:
            self.out.write(json.dumps(record, ensure_ascii=False) + "\n")

    def note(self, message: str) -> None:
        """Print a plain message (no markup: URLs may hold brackets)."""
        self.console.print(message, markup=False, highlight=False, soft_wrap=True)

    def refresh(self) -> None:
        """Update the live progress display."""
        self.progress.update(self.task, description=self.tally.line(), completed=self.tally.settled)

    async def tick(self) -> None:
        """Print a progress line now and then when the console is not a terminal."""
        while True:
            await asyncio.sleep(PLAIN_PROGRESS_SECONDS)
            self.note(self.tally.line())


def auth_message(response: httpx.Response) -> str:
    """Explain a 401/403 in terms of what to fix."""
    detail = error_of(response).get("message") or ""
    return (
        f"the API refused the key ({response.status_code} {detail}); check --key or "
        "EVIDENCE_API_KEY and that the key may use this workspace with scope agent:research"
    )


def summary_table(tally: Tally, waited: bool) -> Table:
    """Build the closing summary: line outcomes, then states, statuses and reasons."""
    table = Table(title="evidence enqueue")
    table.add_column("outcome")
    table.add_column("lines", justify="right")
    rows = [
        ("entries read", tally.read),
        ("invalid", tally.invalid),
        ("created (202)", tally.created),
        ("already known (200)", tally.known),
        ("rejected (4xx)", tally.rejected),
        ("failed to submit (gave up)", tally.gave_up),
    ]
    if waited:
        rows += [("settled", tally.settled), ("unsettled (timeout)", tally.unsettled)]
        rows += [("lost (404 while polling)", tally.lost)]
    for label, counter in (("state", tally.states), ("status", tally.statuses)):
        rows += [(f"{label} {name}", n) for name, n in sorted(counter.items())]
    rows += [(f"reason {name}", n) for name, n in sorted(tally.reasons.items())]
    for label, n in rows:
        table.add_row(label, str(n))
    return table


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
