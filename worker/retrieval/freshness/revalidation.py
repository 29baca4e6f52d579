"""Keep evidence fresh cheaply: reuse within a client's window, revalidate, remember validators.

The runner calls `look_up` in the claim's transaction, `prepare` before the pipeline, and
`remember` and `settled` at the settle:

* `look_up` finds what this request (workspace, kind, requested URL, language) led to last
  (`worker.retrieval.freshness.sources`), with no transaction of its own. In `prepare`, within the
  client's `max-age` the stored revision is the answer at once, with no fetch (`reused`). Otherwise,
  when every URL the last retrieval fetched left a validator, each is asked again
  conditionally through the guarded fetcher; if every one answers an acceptable 304
  (`worker.retrieval.freshness.conditional.accept_not_modified`) the stored revision is the answer,
  with no download and no extraction (`revalidated`), and the settle names it as it is
  (`stored_revision`). Anything else is a full retrieval, which reuses whatever the
  conditional requests already brought back in full.
* `remember`, run in the settle's own transaction, records what the request led to (revision,
  validators, status) and moves the revision's `last confirmed` time: on a 304 and on a full
  fetch of identical content, not on a reuse (a window is not a confirmation); `settled`
  counts the outcome after the commit (`freshness_metrics`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

import structlog
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.orm import Session

from worker.content.results import Provenance, Result, failure_result, has_content
from worker.domain import clock
from worker.domain.reasons import Reason
from worker.fetch import fleet_metrics
from worker.fetch.egress import deadline_scope
from worker.fetch.types import FetchedResponse, FetchFailure
from worker.retrieval import transitions
from worker.retrieval.freshness import conditional, sources
from worker.retrieval.freshness import metrics as freshness_metrics
from worker.retrieval.freshness.conditional import PrimedFetcher, RecordingFetcher, Validator

if TYPE_CHECKING:
    from worker.fetch.fetcher import Fetcher
    from worker.retrieval.pipeline import PipelineOutput
    from worker.retrieval.records import Claim

log = structlog.get_logger(__name__)

How = Literal["reused", "revalidated"]


@dataclass
class Plan:
    """What `prepare` decided: a finished output, or the fetcher the pipeline should use."""

    fetcher: RecordingFetcher
    #: The stored revision's result (reused or revalidated), or a timeout; None: run the pipeline.
    output: PipelineOutput | None = None
    how: How | None = None
    #: Validators to remember after a revalidation (a 304 may carry fresher ones).
    validators: list[Validator] = field(default_factory=list)
    #: What this request led to last time, as `prepare` read it.
    source: sources.StoredSource | None = None
    #: How the settled retrieval stayed fresh (`freshness_metrics.OUTCOMES`), once settled.
    outcome: str | None = None


def may_reuse(max_age_seconds: int | None, source: sources.StoredSource, now: datetime) -> bool:
    """Whether the stored revision answers without a fetch: the client sent `max-age=N`, the
    request's revision is still the item's latest, and it was fetched or confirmed at most N
    seconds before `now` (age ≤ N: `max-age=0` reuses only what was confirmed this instant)."""
    if max_age_seconds is None or source.revision != source.latest_revision:
        return False
    return now - source.last_confirmed <= timedelta(seconds=max_age_seconds)


def stored_result(kind: str, source: sources.StoredSource, now: datetime) -> Result:
    """The stored revision as a `result`: the same content and status, `retrieved_at` = `now`."""
    provenance: Provenance = {**source.provenance, "retrieved_at": clock.isoformat(now)}  # type: ignore[typeddict-item]
    return {
        "kind": kind,  # type: ignore[typeddict-item]
        "status": source.outcome["status"],
        "text": source.text,
        "title": source.title,
        "description": source.description,
        "segments": source.segments,
        "provenance": provenance,
        "reason": source.outcome["reason"],
        "warnings": list(source.outcome["warnings"]),
        "retry_after_seconds": None,
    }


#: What `look_up` found: the retrieval's reuse window (None: none), and what its request led
#: to last (None: nothing yet, or unreadable).
Found = tuple[int | None, sources.StoredSource | None]


def look_up(session: Session, claim: Claim) -> Found:
    """What this claim's request led to last, read in the claim's own transaction (one round
    trip and no transaction of its own). A row it cannot read means a full retrieval."""
    try:
        return sources.find(
            session, claim.retrieval_id, claim.workspace_id, claim.kind, claim.url, claim.language
        )
    except (KeyError, TypeError, ValueError) as exc:  # a stored row this version cannot read
        log.warning("revalidation_skipped", error=type(exc).__name__)
        return None, None


def look_up_many(session: Session, claims: Sequence[Claim]) -> list[Found]:
    """`look_up` for a group of claims, in two reads whatever their number (in order)."""
    rows = sources.find_many(
        session, [(c.retrieval_id, c.workspace_id, c.kind, c.url, c.language) for c in claims]
    )
    found: list[Found] = []
    for claim in claims:
        max_age, row = rows.get(claim.retrieval_id, (None, None))
        try:
            found.append((max_age, None if row is None else sources.stored_source(row)))
        except (KeyError, TypeError, ValueError) as exc:  # a row this version cannot read
            log.warning("revalidation_skipped", error=type(exc).__name__)
            found.append((None, None))
    return found


def prepare(
    claim: Claim, found: Found, fetcher: Fetcher, pipeline_fetcher: conditional.FetcherLike
) -> Plan:
    """Reuse or revalidate what this request led to last (`found`, from `look_up`); else the
    fetcher for a full run.

    `fetcher` sends the conditional requests; `pipeline_fetcher` (the same one, metered) serves
    a full retrieval. Never raises for a source: doubt means a full retrieval.
    """
    plan = Plan(RecordingFetcher(pipeline_fetcher))
    try:
        return _prepare(claim, found, fetcher, pipeline_fetcher, plan)
    except SoftTimeLimitExceeded:
        log.warning("soft_time_limit")
        plan.output = _output(failure_result(claim.kind, Reason.TIMEOUT, clock.now()))  # type: ignore[arg-type]
        return plan
    except Exception as exc:  # noqa: BLE001  (a plain retrieval is always a correct answer)
        log.warning("revalidation_skipped", error=type(exc).__name__)
        return plan


def _output(result: Result) -> PipelineOutput:
    # Imported when first used: the pipeline loads trafilatura (about a second).
    from worker.retrieval.pipeline import PipelineOutput

    return PipelineOutput(result)


def _prepare(
    claim: Claim,
    found: Found,
    fetcher: Fetcher,
    pipeline_fetcher: conditional.FetcherLike,
    plan: Plan,
) -> Plan:
    max_age, source = found
    if source is None:
        return plan
    plan.source = source
    if may_reuse(max_age, source, clock.now()):
        plan.output, plan.how = _output(stored_result(claim.kind, source, clock.now())), "reused"
        return plan
    validators: list[Validator] = source.validators
    if not conditional.can_revalidate(validators):
        return plan
    with deadline_scope(fetcher.settings.fetch_total_timeout_seconds) as deadline:
        primed, confirmed = _revalidate(fetcher, validators)
    if len(confirmed) == len(validators):
        plan.output = _output(stored_result(claim.kind, source, clock.now()))
        plan.how, plan.validators = "revalidated", confirmed
        return plan
    plan.fetcher = RecordingFetcher(PrimedFetcher(pipeline_fetcher, primed, deadline))
    return plan


def _revalidate(
    fetcher: Fetcher, validators: list[Validator]
) -> tuple[dict[str, FetchedResponse | FetchFailure], list[Validator]]:
    """Ask each URL again, in order, until one is not confirmed: what came back in full (a
    200 or a failure, by URL), and the validators of the URLs confirmed so far."""
    primed: dict[str, FetchedResponse | FetchFailure] = {}
    confirmed: list[Validator] = []
    for validator in validators:
        headers = conditional.conditional_headers(validator)
        start = time.perf_counter()
        try:
            answer = fetcher.revalidate(validator["url"], headers)
        except FetchFailure as failure:
            primed[validator["url"]] = failure
            break
        if conditional.accept_not_modified(headers, validator, answer):
            fleet_metrics.record_fetch("not_modified", time.perf_counter() - start, 0)
            confirmed.append(conditional.updated(validator, answer))  # type: ignore[arg-type]
            continue
        if isinstance(answer, FetchedResponse):
            fleet_metrics.record_fetch(
                "truncated" if answer.truncated else "ok",
                time.perf_counter() - start,
                len(answer.body),
            )
            primed[validator["url"]] = answer
        break
    return primed, confirmed


def stored_revision(plan: Plan) -> tuple[uuid.UUID, int] | None:
    """The stored revision a reused or revalidated answer is (the settle names it as it is,
    with no fingerprint to compute and no item to lock); None for a fetched result."""
    if plan.how is None or plan.source is None:
        return None
    return plan.source.evidence_id, plan.source.revision


def remember(claim: Claim, plan: Plan, result: Result, now: datetime) -> transitions.AfterSettle:
    """What the settle's transaction does once it won: note what the request led to.

    The revision is confirmed `now` (unless the answer was a reuse: a window is not a
    confirmation), the request's row is written when anything in it changed, and the outcome
    is kept on `plan` for `settled` to count after the commit.
    """

    def write(
        session: Session, evidence_id: uuid.UUID | None, revision: int | None, written: bool
    ) -> None:
        plan.outcome = None
        if evidence_id is None or revision is None or not has_content(result):
            return
        if plan.how == "reused":
            plan.outcome = "reused"
            return
        # A revision this settle wrote was first seen now, which is its last confirmation
        # (`sources.LAST_CONFIRMED`): no UPDATE needed to say so. A 304 needs no answer from
        # the confirmation (it is never a new revision): written with the group's at commit.
        if plan.how == "revalidated":
            sources.confirm_at_commit(session, evidence_id, revision, now)
            new = False
        else:
            new = written or sources.confirm(session, evidence_id, revision, now)
        validators = plan.validators if plan.how == "revalidated" else plan.fetcher.validators
        outcome = {
            "status": result["status"],
            "reason": result["reason"],
            "warnings": result["warnings"],
        }
        stored = plan.source
        led_to = (evidence_id, revision, validators, outcome)
        if stored is None or led_to != (
            stored.evidence_id,
            stored.revision,
            stored.validators,
            stored.outcome,
        ):
            sources.remember(
                session,
                claim.workspace_id,
                claim.kind,
                claim.url,
                claim.language,
                evidence_id=evidence_id,
                revision=revision,
                validators=list(validators),
                outcome=outcome,
                at=now,
            )
        if plan.how == "revalidated":
            plan.outcome = "revalidated"
        else:
            plan.outcome = "new_revision" if new else "unchanged"

    return write


def settled(claim: Claim, plan: Plan, won: bool) -> None:
    """After the settle's commit: count how the evidence stayed fresh (`freshness_metrics`)."""
    if won and plan.outcome is not None:
        freshness_metrics.record(plan.outcome, claim.kind)
