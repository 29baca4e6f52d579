"""Each workspace has only a few large diffs admitted at once in an API process.

One workspace's diffs of two 1 000-cue revisions past EVIDENCE_DIFF_PER_WORKSPACE are refused
at once with 429 `rate_limited` and Retry-After; the admissions are given back afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import Env
from tests.read.test_evidence_diff import track
from tests.support.factories import check_envelope, make_key
from tests.support.served import served_api
from worker.content.results import Segment

pytestmark = pytest.mark.lifecycle

CLIENTS = 10
PER_WORKSPACE = 2
FIRST = [Segment(2_000 * n, 2_000 * n + 1_500, f"cue {n} of the talk") for n in range(1_000)]
SECOND = [
    Segment(c.start_ms + 700, c.end_ms + 700, c.text + (" (reworded)" if n % 10 else ""))
    for n, c in enumerate(FIRST)
]


@pytest.fixture(scope="module")
def api_url(env: Env) -> Iterator[str]:
    settings = {
        "EVIDENCE_DIFF_CONCURRENCY": "1",
        "EVIDENCE_DIFF_PER_WORKSPACE": str(PER_WORKSPACE),
        "EVIDENCE_DIFF_QUEUE": str(CLIENTS * 2),
    }
    # The bounds are each process's own: one process, so every call meets the same ones.
    with served_api(env.tmp / "api-diff-bounds.log", settings, workers=1) as url:
        yield url


def large_diff(workspace: uuid.UUID) -> tuple[str, dict[str, str]]:
    """The path of a 1 000-cue diff in `workspace`, and a key's headers for it."""
    item = track(workspace, [FIRST, SECOND])
    headers = {"Authorization": f"Bearer {make_key([workspace])}"}
    return f"/research-api/evidence/{item}/diff?from=1&to=2", headers


def test_one_workspace_past_its_bound_is_refused(api_url: str) -> None:
    """Ten diffs at once from one workspace: at most PER_WORKSPACE run, the rest are 429."""
    path, headers = large_diff(uuid.uuid4())
    with ThreadPoolExecutor(10) as pool:
        answers = list(
            pool.map(
                lambda _: httpx.get(f"{api_url}{path}", headers=headers, timeout=120), range(10)
            )
        )
    statuses = sorted(r.status_code for r in answers)
    assert statuses.count(200) >= PER_WORKSPACE and statuses.count(429) >= 1, statuses
    assert set(statuses) == {200, 429}
    for response in answers:
        if response.status_code == 429:
            error = check_envelope(response, 429, "rate_limited")
            assert error["details"] == {"retry_after_seconds": 1}
            assert response.headers["retry-after"] == "1"
    # Its admissions are given back: one more diff afterwards is answered.
    assert httpx.get(f"{api_url}{path}", headers=headers, timeout=120).status_code == 200
