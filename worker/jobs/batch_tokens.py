"""What one batch-lane message runs: the next batch retrieval, then, while nothing else wants
the thread, the retrievals of further tokens it takes itself (`spare_tokens`).

A batch message carries no retrieval: it stands for one unit of the lane's work, and the fair
claim (`worker.retrieval.claims.claim_next_batch`) picks which. Each retrieval run this way is
listed in Flower as a task of its own (`flower_tasks`).
"""

from __future__ import annotations

from typing import Any

import structlog

from worker.jobs import flower_tasks, spare_tokens
from worker.platform import confine
from worker.retrieval import run as runner

log = structlog.get_logger(__name__)


def run_next_batch() -> dict[str, Any] | None:
    """Process one batch-lane message: claim the next batch retrieval fairly, run it; then, on
    a threads worker with nothing else for this thread, take further tokens and run theirs
    (`spare_tokens`). The first retrieval's outcome, with the others' under "then".

    None when there was nothing to claim (another token ran the retrieval this one stood for).
    """
    spare_tokens.fan_out(_run_fanned_out)
    return _run_with_follow_ons()


def _run_fanned_out() -> None:
    """A token `spare_tokens.fan_out` took, on an idle thread: as a delivered one, its outcomes
    logged only (no Celery task stands for them)."""
    try:
        _run_with_follow_ons()
    except Exception:  # no task reports it: the log must (the row's lease and the sweep recover it)
        log.exception("fanned_out_batch_failed")


def _run_with_follow_ons() -> dict[str, Any] | None:
    """The next batch retrieval, then further tokens' while nothing else wants the thread."""
    first = _run_next_batch()
    if first is None:
        return None
    then: list[dict[str, Any]] = []
    while len(then) < spare_tokens.MAX_FOLLOW_ONS and spare_tokens.take():
        try:
            outcome = _run_next_batch()
        except Exception as exc:  # noqa: BLE001  (the next token's claim is another's)
            # A retrieval's own failure is confined in `run_claim`: this is its claim's, and
            # the row it stood for stays pending, published again by the sweep.
            confine.record("follow_on", "left", exc)
            then.append({"delivery": "failed", "error": type(exc).__name__})
            continue
        if outcome is None:  # the lane is empty: the token was a spare one
            break
        then.append(outcome)
    return {**first, "then": then} if then else first


def _run_next_batch() -> dict[str, Any] | None:
    claimed = runner.claim_next_batch()
    if claimed is None:
        log.info("claim_skipped", lane="batch")
        return None
    structlog.contextvars.bind_contextvars(retrieval_id=str(claimed[0].retrieval_id))
    return flower_tasks.listed(claimed[0].retrieval_id, lambda: runner.run_claim(*claimed))
