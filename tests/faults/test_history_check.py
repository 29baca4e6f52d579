"""The history's own check of "a retrieval settles once", on made-up histories (no services)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.faults.history import History, Op


def answer(state: str) -> dict[str, Any]:
    return {"retrieval": {"id": "r1", "state": state}}


def history(*ops: Op) -> History:
    return History(api=None, workspace=uuid.uuid4(), ops=list(ops))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("later", "message"),
    [("running", "left a settled state"), ("cancelled", "changed after settling")],
)
def test_a_later_read_that_disagrees_with_a_settled_answer_fails(later: str, message: str) -> None:
    """Sent after the settled answer came: open again, or settled otherwise, is a fault."""
    seen = history(
        Op("get", "r1", 200, answer("completed"), at=2.0, started=1.0),
        Op("get", "r1", 200, answer(later), at=4.0, started=3.0),
    )
    with pytest.raises(AssertionError, match=message):
        seen._check_settle_once()


def test_an_open_read_overlapping_a_settled_answer_passes() -> None:
    """Sent before the settled answer came, answered after it: either order is possible."""
    seen = history(
        Op("get", "r1", 200, answer("completed"), at=2.0, started=1.0),
        Op("post", "m1", 200, answer("running"), at=3.0, started=1.5),
    )
    seen._check_settle_once()
