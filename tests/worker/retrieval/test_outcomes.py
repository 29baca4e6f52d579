"""The retrieval task's return value: how the retrieval ended, small and JSON-serialisable."""

from __future__ import annotations

import json
import uuid

from worker.content.results import failure_result
from worker.domain.clock import now
from worker.domain.reasons import Reason
from worker.retrieval.outcomes import task_outcome


class TestTaskOutcome:
    """`task_outcome` names the delivery and the retrieval's recorded state, status and reason."""

    def test_settled_names_status_reason_and_attempt(self) -> None:
        """A settled delivery carries the result's status and reason, never its text."""
        rid = uuid.uuid4()
        result = {"status": "ready", "reason": None, "text": "page text " * 100, "title": "t"}
        outcome = task_outcome(rid, "settled", "completed", result, 2)
        assert outcome == {
            "retrieval_id": str(rid),
            "delivery": "settled",
            "state": "completed",
            "status": "ready",
            "reason": None,
            "attempt": 2,
        }
        assert json.loads(json.dumps(outcome)) == outcome

    def test_failure_result(self) -> None:
        """An unavailable page: the reason an operator looks for is in the value."""
        result = failure_result("url_text", Reason.NOT_FOUND, now())
        outcome = task_outcome(uuid.uuid4(), "settled", "completed", result, 1)
        assert (outcome["status"], outcome["reason"]) == ("unavailable", "not_found")

    def test_skipped_without_a_row(self) -> None:
        """A delivery for a retrieval that no longer exists says so: no state, no attempt."""
        outcome = task_outcome(uuid.uuid4(), "skipped", None)
        assert outcome["delivery"] == "skipped"
        assert outcome["state"] is outcome["status"] is outcome["reason"] is None
        assert outcome["attempt"] is None
