"""An unexpected exception in the content step settles the retrieval at once.

Whatever a source makes a parser raise, it raises again on every attempt; the retrieval used
to fail until max_attempts and end `unconfirmed`. It now settles on its first attempt as
`unsupported` / `unsupported_content`, and the exception's text stays in the worker's log.

The retrieval runs through the worker's own entry point (`runner.run_retrieval`: claim, fetch
from the loopback site, extract, settle in the database) in this process, so the extraction
library can be made to raise here; the real Celery worker runs that same function.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.support.factories import Api
from tests.support.pages import article
from tests.support.tls_site import TLSSite

SECRET = "exploded-on-the-secret-word-zanzibar"


@pytest.fixture
def stored(site: TLSSite, workspace: uuid.UUID) -> uuid.UUID:
    """A pending url_text retrieval of a fresh article (recorded, not handed to the broker)."""
    from worker.domain import clock
    from worker.platform.settings import get_settings
    from worker.retrieval import records as retrievals
    from worker.store import db

    url = site.page(f"/content-failure/{uuid.uuid4().hex}", article("Lakes"))
    request = retrievals.NewRetrieval(workspace, uuid.uuid4(), url, "url_text", None)
    ttl = timedelta(seconds=get_settings().receipt_ttl_seconds)
    row, created = db.with_transient_retry(
        lambda s: retrievals.create_retrieval(s, request, clock.now(), ttl)
    )
    assert created
    return row.id


def test_unexpected_extraction_error_settles_on_first_attempt(
    api: Api,
    stored: uuid.UUID,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The extractor raising settles the first attempt as unsupported_content, text unleaked."""
    from worker.content import html
    from worker.retrieval import run as runner
    from worker.store import db, retrieval_view

    def explode(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError(SECRET)

    monkeypatch.setattr(html.trafilatura, "bare_extraction", explode)
    assert runner.run_retrieval(stored)["delivery"] == "settled"

    response = api.get(str(stored))
    assert SECRET not in response.text
    retrieval = response.json()["retrieval"]
    assert retrieval["state"] == "completed", retrieval
    result = retrieval["result"]
    assert (result["status"], result["reason"]) == ("unsupported", "unsupported_content")
    assert result["text"] == "" and retrieval["evidence"] is None
    with db.session_scope(readonly=True) as session:
        row = retrieval_view.get_retrieval(session, stored)
        assert row is not None and row.attempt == 1
    logged = "".join(capfd.readouterr())
    assert "content_step_failed" in logged and "RuntimeError" in logged
    # A later delivery of the same retrieval finds nothing left to do.
    assert runner.run_retrieval(stored)["delivery"] == "skipped"
