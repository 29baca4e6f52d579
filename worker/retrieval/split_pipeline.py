"""The content pipeline split at its fetches, so fetching and extracting can run apart.

The pipeline (`worker.content`) calls `fetcher.fetch(url)` and then works on the bytes; it may
fetch again (a page's caption track). Here it runs over a `ReplayFetcher` that answers from
responses fetched earlier and raises `NeedFetch` for a URL it has not got. A retrieval is then
a loop: run the step where CPU work belongs (an extraction process), and whenever it asks for a
URL, fetch that where network waits belong (the worker's threads) and run the step again with
the new response. The pipeline is deterministic given its responses, so a step that is run
again only repeats the work that led up to the fetch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.domain.reasons import Reason
from worker.fetch.types import FetchedResponse, FetchFailure

#: Fetches one retrieval makes at most (a page, then its caption file), with room to spare.
MAX_FETCHES = 4


@dataclass
class NeedFetch(Exception):
    """The step needs `url` fetched before it can go on."""

    url: str


@dataclass(frozen=True)
class FailedFetch:
    """A `FetchFailure` as data (exceptions with required fields do not cross processes)."""

    reason: str
    detail: str
    source_url: str | None
    retry_after_seconds: int | None
    warnings: tuple[str, ...]

    @classmethod
    def of(cls, failure: FetchFailure) -> FailedFetch:
        return cls(
            failure.reason.value,
            failure.detail,
            failure.source_url,
            failure.retry_after_seconds,
            tuple(w.value for w in failure.warnings),
        )

    def exception(self) -> FetchFailure:
        return FetchFailure(
            Reason(self.reason),
            self.detail,
            self.source_url,
            self.retry_after_seconds,
            [Reason(w) for w in self.warnings],
        )


Fetched = dict[str, FetchedResponse | FailedFetch]


class ReplayFetcher:
    """A fetcher that answers from `fetched` and asks for anything else."""

    def __init__(self, fetched: Fetched) -> None:
        self.fetched = fetched

    def fetch(self, url: str) -> FetchedResponse:
        answer = self.fetched.get(url)
        if answer is None:
            raise NeedFetch(url)
        if isinstance(answer, FailedFetch):
            raise answer.exception()
        return answer


def pipeline_step(url: str, kind: str, language: str | None, fetched: Fetched) -> Any:
    """Run the pipeline over what was fetched: its `PipelineOutput`, or the `NeedFetch`.

    Returned rather than raised, so it crosses a process boundary as a plain value.
    """
    # Imported when first used: the pipeline loads trafilatura (about a second).
    from worker.retrieval.pipeline import run_pipeline

    try:
        return run_pipeline(ReplayFetcher(fetched), url, kind, language)  # type: ignore[arg-type]
    except NeedFetch as need:
        return need


def drive(
    url: str,
    kind: str,
    language: str | None,
    fetcher: Any,
    extract: Callable[[Fetched], Any],
) -> Any:
    """Run a retrieval's pipeline: fetch with `fetcher` here, run each step with `extract`.

    `extract(fetched)` runs `pipeline_step` over what was fetched wherever CPU work belongs
    (an extraction process) and returns what it returned. The first step, before any fetch,
    only finds what to fetch (or that nothing may be fetched) and runs here; so does a step
    after failed fetches only, which just reports the failure. Returns the `PipelineOutput`.
    """
    fetched: Fetched = {}
    step = pipeline_step(url, kind, language, fetched)
    for _ in range(MAX_FETCHES):
        if not isinstance(step, NeedFetch):
            return step
        fetch_into(fetcher, step.url, fetched)
        if nothing_to_parse(fetched):
            step = pipeline_step(url, kind, language, fetched)
        else:
            step = extract(fetched)
    raise RuntimeError(f"the pipeline asked for more than {MAX_FETCHES} fetches")


def nothing_to_parse(fetched: Fetched) -> bool:
    """True when every fetch failed: the pipeline then only reports the failure (no parsing)."""
    return all(isinstance(answer, FailedFetch) for answer in fetched.values())


def fetch_into(fetcher: Any, url: str, fetched: Fetched) -> None:
    """Fetch `url` with a real fetcher and record the response or the failure."""
    try:
        fetched[url] = fetcher.fetch(url)
    except FetchFailure as failure:
        fetched[url] = FailedFetch.of(failure)
