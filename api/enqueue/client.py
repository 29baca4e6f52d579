"""The `evidence enqueue` client: submit a file of URLs through the HTTP API, optionally wait.

Entries stream from the input (`api.enqueue.input`) in chunks of `chunk_size` (at most 1 000, what
`POST …/retrieve/batch` takes) to `concurrency` worker tasks that share one iterator, so a
100 000-line file never holds more than `concurrency` chunks in memory. Each line carries its
deterministic mutation_id: re-running a file after a crash or Ctrl-C gets 200 for what the
server already has and creates only the rest. The batch answers each item on its own: created
or known lines are submitted, items refused for a quota (429) are sent again after their
`Retry-After`, others (400/409) are rejected lines. With `wait`, a second phase watches the
unsettled retrievals with `POST …/retrievals/batch-get` and `Prefer: wait=N` (the server answers
as soon as one of them settles), oldest first, as many per round as the batch's pace needs
(`watched_next`), at most one round per `poll_interval` while some stay open, until every
retrieval is settled or `timeout` seconds pass. How answers are retried:
`api.enqueue.http`; the out file and the summary: `api.enqueue.report`.

Exit codes (the policy: "did every line get into the service?", not "did every fetch work?"):
    0    every entry was valid and submitted (created or already known), whatever the results
         (unavailable, blocked, still unsettled when `timeout` ran out, unknown while waiting);
    1    some entry was invalid, rejected or failed to submit: fix it or re-run to resume;
    2    usage or auth error (bad options, unreadable input, CSV without `url`, 401/403);
    130  interrupted (Ctrl-C): re-run the same command to resume.
Progress, per-line problems and the closing summary go to `console` (stderr by default).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar
from uuid import UUID

import httpx
from rich.console import Console

from api.enqueue.http import (
    AUTH_STATUSES,
    RETRY_STATUSES,
    AuthError,
    RetryPolicy,
    auth_message,
    backoff_delay,
    error_of,
    item_auth_message,
    item_error,
    item_retry_after,
    parse_retry_after,
    results_of,
    retrievals_of,
)
from api.enqueue.input import (
    STDIN,
    InputError,
    Line,
    LineError,
    check_kind,
    check_language,
    mutation_id,
    read_input,
)
from api.enqueue.report import EXIT_INTERRUPTED, EXIT_USAGE, Report, Tally, exit_code, summary_table

DEFAULT_API_URL = "http://127.0.0.1:8000"
DEFAULT_CONCURRENCY = 4
BATCH_PATH = "/research-api/evidence/retrieve/batch"
BATCH_GET_PATH = "/research-api/evidence/retrievals/batch-get"
#: Most items (or ids) the API takes in one batch request.
MAX_CHUNK = 1000
#: The long-poll asked of the API (`Prefer: wait=N`; the API caps it at 30 s).
LONG_POLL_SECONDS = 30
UNSETTLED_STATES = frozenset({"pending", "running"})
#: The fewest unsettled lines a round of `--wait` reads (unless `--chunk-size` is smaller).
MIN_WATCHED = 100
REQUEST_TIMEOUT = httpx.Timeout(60.0, connect=10.0)  # a long-poll answers within 30 s
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
    chunk_size: int = MAX_CHUNK
    poll_interval: float = 1.0
    timeout: float | None = None  # give up waiting after this many seconds; count unsettled
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    console: Console | None = None
    #: Reuse window sent as `Cache-Control: max-age=N` with every batch (None: not sent).
    max_age: int | None = None


def validate_options(options: EnqueueOptions) -> str | None:
    """Return what is wrong with `options` as a usage error, or None."""
    if options.file != STDIN and not Path(options.file).is_file():
        return f"no such file: {options.file}"
    if not options.key:
        return "no API key: pass --key or set EVIDENCE_API_KEY"
    if not options.api.startswith(("http://", "https://")):
        return f"--api must be an http(s) URL, got {options.api!r}"
    if options.max_age is not None and options.max_age < 0:
        return "--max-age must be 0 or more seconds"
    if options.concurrency < 1:
        return "--concurrency must be at least 1"
    if not 1 <= options.chunk_size <= MAX_CHUNK:
        return f"--chunk-size must be from 1 to {MAX_CHUNK}"
    if options.poll_interval <= 0 or (options.timeout is not None and options.timeout < 0):
        return "the poll interval must be positive and the timeout not negative"
    problem = check_kind(options.kind)
    if problem is None and options.language is not None:
        problem = check_language(options.language)
    return problem


def watched_next(watched: int, settled: int, most: int) -> int:
    """How many of the oldest unsettled lines the next round of `--wait` reads, after a round
    that read `watched` of which `settled` had settled: twice what settled (the pace of the
    batch, with room to speed up), at least half as many as this round (a stalled front
    shrinks the window slowly) and `MIN_WATCHED`, at most `most`.

    Every line read costs the API a row and its JSON each round: reading the oldest 1 000 each
    second, a batch's long-polls cost the API more than its submission.
    """
    return min(most, max(MIN_WATCHED, 2 * settled, watched // 2))


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


@dataclass
class Item:
    """A valid line on its way in: its body, and how often it was refused for a quota."""

    line: Line
    mutation_id: str
    body: dict[str, Any]
    refusals: int = 0


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
                chunks = self.chunks(read_input(o.file, o.kind, o.language))
                await drain(chunks, self.submit, o.concurrency)
                if self.waiting:
                    await self.wait_all()
        finally:
            if ticker is not None:
                ticker.cancel()
            self.note(self.tally.line())

    def chunks(self, entries: Iterable[Line | LineError]) -> Iterator[list[Item]]:
        """Group valid entries into chunks of `chunk_size`; report invalid ones on the way."""
        o, chunk = self.options, []
        for entry in entries:
            self.tally.read += 1
            if isinstance(entry, LineError):
                self.tally.invalid += 1
                self.note(f"line {entry.number}: invalid: {entry.message}")
                error = {"code": "invalid_line", "message": entry.message}
                self.write({"line": entry.number, "url": None, "error": error})
                continue
            mid = str(mutation_id(o.workspace, entry.kind, entry.language, entry.url, o.batch))
            body = {"url": entry.url, "kind": entry.kind, "workspace_id": str(o.workspace)}
            body |= {"mutation_id": mid} | ({"language": entry.language} if entry.language else {})
            chunk.append(Item(entry, mid, body))
            if len(chunk) >= o.chunk_size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    async def submit(self, chunk: list[Item]) -> None:
        """Submit one chunk; send items refused for a quota again after their Retry-After."""
        policy = self.options.retry
        while chunk:
            outcome, answer = await self.post(chunk)
            if outcome != "answered":
                for item in chunk:
                    self.refused(item, outcome, answer)
                return
            again: list[Item] = []
            wait = 0.0
            for item, result in zip(chunk, answer["results"], strict=True):
                status = result.get("status")
                if status in (200, 202):
                    self.accepted(item, "created" if status == 202 else "known", result)
                elif status in AUTH_STATUSES:
                    raise AuthError(item_auth_message(result))
                elif status in RETRY_STATUSES and item.refusals + 1 < policy.attempts:
                    item.refusals += 1
                    again.append(item)
                    wait = max(wait, item_retry_after(result) or 0.0)
                else:
                    outcome = "gave_up" if status in RETRY_STATUSES else "rejected"
                    self.refused(item, outcome, item_error(result), item.refusals + 1)
            if again:
                attempt = max(item.refusals for item in again)
                await asyncio.sleep(backoff_delay(policy, attempt, wait))
            chunk = again

    def accepted(self, item: Item, outcome: str, result: dict[str, Any]) -> None:
        """Count a created or known line; keep it for the wait, or write it now."""
        setattr(self.tally, outcome, getattr(self.tally, outcome) + 1)
        pending = Pending(item.line, item.mutation_id, dict(result["retrieval"]))
        if self.options.wait and pending.retrieval.get("state") in UNSETTLED_STATES:
            self.waiting.append(pending)
        else:
            self.finish(pending)
        self.refresh()

    def refused(
        self, item: Item, outcome: str, error: dict[str, Any], attempts: int | None = None
    ) -> None:
        """Count and report a line that did not get in (rejected, or given up on)."""
        setattr(self.tally, outcome, getattr(self.tally, outcome) + 1)
        error = dict(error)
        if outcome == "gave_up" and attempts is not None:
            error["message"] = f"{error.get('message')} (gave up after {attempts} attempts)"
        line = item.line
        self.note(f"line {line.number}: not submitted: {error.get('message')} ({line.url})")
        self.write(
            {"line": line.number, "url": line.url, "mutation_id": item.mutation_id}
            | {"error": error}
        )
        self.refresh()

    @property
    def batch_headers(self) -> dict[str, str]:
        """The batch POST's own headers: the reuse window, if one was asked for."""
        max_age = self.options.max_age
        return {} if max_age is None else {"Cache-Control": f"max-age={max_age}"}

    async def post(self, chunk: list[Item]) -> tuple[str, dict[str, Any]]:
        """POST one chunk, retrying transient failures: (outcome, answer or error).

        `answered` with the batch's body, `rejected` when the API refused the request as a
        whole (it never should: the client builds valid envelopes), `gave_up` after the
        policy's attempts. Resending a chunk is safe: the mutation ids make it idempotent.
        """
        policy = self.options.retry
        error: dict[str, Any] = {}
        for attempt in range(1, policy.attempts + 1):
            retry_after = None
            try:
                payload = {"items": [item.body for item in chunk]}
                response = await self.client.post(
                    BATCH_PATH, json=payload, headers=self.batch_headers
                )
            except httpx.TransportError as exc:
                error = {"code": "transport_error", "message": f"{type(exc).__name__}: {exc}"}
            else:
                status = response.status_code
                answer = results_of(response, len(chunk)) if status == 200 else None
                if answer is not None:
                    return "answered", answer
                if status in AUTH_STATUSES:
                    raise AuthError(auth_message(response))
                error = error_of(response)
                if status not in RETRY_STATUSES and status != 200:
                    return "rejected", error
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
            if attempt < policy.attempts:
                await asyncio.sleep(backoff_delay(policy, attempt, retry_after))
        error["message"] = f"{error.get('message')} (gave up after {policy.attempts} attempts)"
        return "gave_up", error

    async def wait_all(self) -> None:
        """Watch the unsettled retrievals, oldest first, until all settle or the time is up.

        Each round long-polls the oldest unsettled ones (the API answers as soon as one of
        them settles; how many: `watched_next`, at most `chunk_size`) and takes at least
        `poll_interval`, so a round reports what settled meanwhile together; a round in which
        every line read had settled is followed at once. When the timeout comes, one last
        round reads every line.
        """
        o, loop = self.options, asyncio.get_running_loop()
        deadline = None if o.timeout is None else loop.time() + o.timeout
        self.report.waiting_for(self.tally.settled + len(self.waiting))
        watched = min(MIN_WATCHED, o.chunk_size)
        while self.waiting:
            started = loop.time()
            remaining = None if deadline is None else deadline - started
            if remaining is not None and remaining <= 0:
                break
            wait = (
                LONG_POLL_SECONDS if remaining is None else int(min(LONG_POLL_SECONDS, remaining))
            )
            group = self.waiting[:watched]
            await self.read(group, wait)
            self.waiting = [pending for pending in self.waiting if not pending.done]
            settled = sum(pending.done for pending in group)
            watched = watched_next(len(group), settled, o.chunk_size)
            spent = loop.time() - started
            pause = 0.0 if settled == len(group) else o.poll_interval - spent
            if remaining is not None:
                pause = min(pause, deadline - loop.time())  # type: ignore[operator]
            if self.waiting and pause > 0:
                await asyncio.sleep(pause)
        for start in range(0, len(self.waiting), o.chunk_size):  # the last look at every line
            await self.read(self.waiting[start : start + o.chunk_size], 0)
        self.waiting = [pending for pending in self.waiting if not pending.done]
        self.tally.unsettled += len(self.waiting)
        for pending in self.waiting:
            self.finish(pending)

    async def read(self, group: list[Pending], wait: int) -> None:
        """Read a group of retrievals (long-polling `wait` s); settle what has settled.

        A transient failure leaves the group for the next round (after a short pause).
        """
        ids = [pending.retrieval["id"] for pending in group]
        headers = {"Prefer": f"wait={wait}"} if wait > 0 else {}
        try:
            response = await self.client.post(BATCH_GET_PATH, json={"ids": ids}, headers=headers)
        except httpx.TransportError:
            await asyncio.sleep(self.options.poll_interval)
            return
        if response.status_code in AUTH_STATUSES:
            raise AuthError(auth_message(response))
        found = retrievals_of(response, len(group)) if response.status_code == 200 else None
        if found is None:
            await asyncio.sleep(self.options.poll_interval)
            return
        for pending, retrieval in zip(group, found, strict=True):
            if retrieval is None:
                self.lost(pending)
            else:
                pending.retrieval = retrieval
                if retrieval.get("state") not in UNSETTLED_STATES:
                    self.finish(pending)

    def lost(self, pending: Pending) -> None:
        """A retrieval the API no longer knows (or this key cannot read)."""
        self.tally.lost, pending.done, line = self.tally.lost + 1, True, pending.line
        self.note(f"line {line.number}: retrieval {pending.retrieval['id']} not found")
        record = {"line": line.number, "url": line.url, "mutation_id": pending.mutation_id}
        self.write(record | {"error": {"code": "not_found", "message": "no such retrieval"}})

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
