"""The batch route's service: up to 1 000 retrievals in one request, each answered on its own.

Each item is checked and answered exactly as `POST /research-api/evidence/retrieve` would answer
it alone (`api.services.retrievals` holds what both share); the database work is one transaction
for the whole batch and the publish one Redis command.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import ApiError, envelope, invalid_input, not_entitled, validation_error
from api.schemas import RetrieveRequest
from api.services import admission as quotas
from api.services import read_admission
from api.services.evidence_payload import retrieval_payload
from api.services.retrievals import (
    announce_created,
    conflict_error,
    new_retrieval,
    refusal_error,
)
from worker.domain import clock
from worker.jobs import outbox
from worker.platform.settings import get_settings
from worker.retrieval import publication
from worker.retrieval import records as retrievals
from worker.store import db, retrieval_view


def _item_error(error: ApiError) -> dict[str, Any]:
    body = envelope(error.code, error.message, error.field, error.details)
    return {"status": error.status, **body}


def parse_item(item: Any) -> RetrieveRequest | ApiError:
    """One batch item checked exactly as the single route checks its body."""
    if not isinstance(item, dict):
        return invalid_input("each item must be a JSON object (a retrieve body)")
    try:
        return RetrieveRequest.model_validate(item)
    except ValidationError as exc:
        return validation_error(exc.errors())


def submit_batch(
    principal: Principal, items: list[Any], max_age: int | None = None
) -> list[dict[str, Any]]:
    """Record a batch of retrievals in the batch lane; one result per item, in order.

    Each item is answered as the single route would answer it alone (202 created, 200 already
    known, 400 invalid, 403 not entitled to its workspace, 409 conflicting replay, 429 over the
    workspace's rate or open ceiling), and one item's failure never touches another. The
    database work is one transaction for the whole batch (a few statements per workspace), the
    publish one Redis command.
    """
    principal.require(None)
    settings = get_settings()
    ttl = timedelta(seconds=settings.receipt_ttl_seconds)
    results: list[dict[str, Any] | None] = [None] * len(items)
    wanted: dict[uuid.UUID, list[tuple[int, RetrieveRequest]]] = {}
    for index, item in enumerate(items):
        parsed = parse_item(item)
        if isinstance(parsed, ApiError):
            results[index] = _item_error(parsed)
        elif not principal.can_read(parsed.workspace):
            results[index] = _item_error(not_entitled("this key has no access to that workspace"))
        else:
            wanted.setdefault(parsed.workspace, []).append((index, parsed))
    grants: dict[uuid.UUID, tuple[quotas.Limits, quotas.Grant]] = {}
    for workspace_id, entries in wanted.items():
        limits = quotas.limits_for(workspace_id)
        grants[workspace_id] = (limits, quotas.limiter.take(workspace_id, len(entries), limits))

    def record(session: Session) -> dict[uuid.UUID, retrievals.BatchOutcome]:
        now = clock.now()
        return {
            workspace_id: retrievals.create_batch_within_quota(
                session,
                workspace_id,
                [new_retrieval(request, max_age) for _, request in wanted[workspace_id]],
                now,
                ttl,
                limits.open_retrievals,
                grant.granted,
            )
            for workspace_id, (limits, grant) in sorted(grants.items())  # one lock order
        }

    try:
        outcomes = db.with_transient_retry(record) if grants else {}
    except SQLAlchemyError:  # nothing was recorded (a 503): give the tokens back
        for workspace_id, (limits, grant) in grants.items():
            quotas.limiter.refund(workspace_id, grant.granted, limits)
        raise
    created: list[retrieval_view.RetrievalRow] = []
    for workspace_id, (limits, grant) in grants.items():
        outcome = outcomes[workspace_id]
        answered: set[uuid.UUID] = set()
        for index, request in wanted[workspace_id]:
            results[index] = _batch_result(outcome, request, answered, limits, grant)
        created += outcome.created.values()
        quotas.limiter.refund(workspace_id, grant.granted - len(outcome.created), limits)
        _charge_replays(workspace_id, [index for index, _ in wanted[workspace_id]], results)
    if created:
        announce_created(created)
        sent = set(outbox.publish([row.id for row in created], "batch"))
        unsent = [row.id for row in created if row.id not in sent]
        if unsent:  # the broker did not take them: the sweep publishes them later
            db.with_transient_retry(lambda s: publication.mark_unpublished(s, unsent))
    return [result for result in results if result is not None]


def _charge_replays(
    workspace_id: uuid.UUID, indexes: list[int], results: list[dict[str, Any] | None]
) -> None:
    """Replayed items are polls: they cost read tokens, one per BATCH_GET_IDS_PER_TOKEN as a
    batch-get would; over the read rate each is answered 429 instead (new items are not)."""
    replayed = [
        i for i in indexes if (result := results[i]) is not None and result["status"] == 200
    ]
    if not replayed:
        return
    try:
        read_admission.admit(workspace_id, tokens=read_admission.batch_get_tokens(len(replayed)))
    except ApiError as refusal:
        for index in replayed:
            results[index] = _item_error(refusal)


def _batch_result(
    outcome: retrievals.BatchOutcome,
    request: RetrieveRequest,
    answered: set[uuid.UUID],
    limits: quotas.Limits,
    grant: quotas.Grant,
) -> dict[str, Any]:
    """One item's result from its workspace's outcome."""
    mutation = request.mutation
    if mutation in outcome.refused:
        return _item_error(refusal_error(outcome.refused[mutation], limits, grant))
    row = outcome.created.get(mutation)
    status = 202
    if row is None or mutation in answered:
        status = 200
        row = row or outcome.existing[mutation]
        try:
            retrievals.check_same_request(row, new_retrieval(request))
        except retrievals.MutationConflict:
            return _item_error(conflict_error())
    answered.add(mutation)
    return {"status": status, **retrieval_payload(row)}
