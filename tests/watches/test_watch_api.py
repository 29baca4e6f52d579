"""The watch routes: create, list, get, update, delete; malformed bodies; the cap; isolation."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest

from tests.support.factories import check_envelope, make_key
from tests.watches.support import Watches

URL = "https://news.example.org/page"


@pytest.fixture
def watches(http: object, workspace: uuid.UUID) -> Watches:
    return Watches(http, make_key([workspace]))


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class TestRoutes:
    def test_create_get_list(self, watches: Watches, workspace: uuid.UUID) -> None:
        """A new watch: enabled, never run, its first slot within one interval from now."""
        from worker.domain import clock

        before = clock.now()
        watch = watches.create(workspace, URL, language="en", interval_seconds=600)
        assert watch["url"] == URL and watch["kind"] == "url_text" and watch["language"] == "en"
        assert watch["enabled"] is True and watch["interval_seconds"] == 600
        assert watch["last_run_at"] is None and watch["missed_runs"] == 0
        assert watch["failing"] is False and watch["last_retrieval_id"] is None
        first = _instant(watch["next_run_at"])
        assert before < first <= clock.now() + timedelta(seconds=600)
        got = watches.call("GET", f"/{watch['id']}")
        assert got.status_code == 200 and got.json() == {"watch": watch}
        listed = watches.call("GET", params={"workspace_id": str(workspace)})
        assert listed.json() == {"watches": [watch]}
        assert watches.call("GET").json() == {"watches": [watch]}

    def test_update_and_delete(self, watches: Watches, workspace: uuid.UUID) -> None:
        """PATCH changes what it names, and only that; after DELETE the watch is a 404."""
        watch = watches.create(workspace, URL, language="en")
        changed = watches.call("PATCH", f"/{watch['id']}", json={"enabled": False})
        assert changed.status_code == 200
        assert changed.json()["watch"]["enabled"] is False
        assert changed.json()["watch"]["next_run_at"] == watch["next_run_at"]
        changed = watches.call(
            "PATCH", f"/{watch['id']}", json={"interval_seconds": 300, "language": None}
        )
        after = changed.json()["watch"]
        assert after["interval_seconds"] == 300 and after["language"] is None
        assert after["url"] == URL and after["enabled"] is False
        assert watches.call("DELETE", f"/{watch['id']}").status_code == 204
        check_envelope(watches.call("GET", f"/{watch['id']}"), 404, "not_found")
        check_envelope(watches.call("DELETE", f"/{watch['id']}"), 404, "not_found")

    def test_cap_per_workspace(
        self, watches: Watches, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """EVIDENCE_WATCH_LIMIT_PER_WORKSPACE watches, then 409 naming the workspace."""
        from worker.platform.settings import get_settings

        monkeypatch.setattr(get_settings(), "watch_limit_per_workspace", 2)
        watches.create(workspace, URL)
        watches.create(workspace, URL + "2")
        body = {"workspace_id": str(workspace), "url": URL, "kind": "url_text"}
        error = check_envelope(
            watches.call("POST", json={**body, "interval_seconds": 300}), 409, "invalid_input"
        )
        assert error["field"] == "workspace_id"


#: Malformed create bodies, and the field each 400 names.
BAD_CREATES = [
    ({"url": "not a url"}, "url"),
    ({"url": "https://"}, "url"),
    ({"url": "http://news.example.org/"}, "url"),
    ({"url": "ftp://news.example.org/"}, "url"),
    ({"url": 7}, "url"),
    ({"interval_seconds": 299}, "interval_seconds"),
    ({"interval_seconds": 0}, "interval_seconds"),
    ({"interval_seconds": -300}, "interval_seconds"),
    ({"interval_seconds": "3600"}, "interval_seconds"),
    ({"interval_seconds": 10**12}, "interval_seconds"),
    ({"kind": "video"}, "kind"),
    ({"language": "en\n"}, "language"),
    ({"language": None}, "language"),
    ({"enabled": "yes"}, "enabled"),
    ({"workspace_id": "nope"}, "workspace_id"),
    ({"surprise": 1}, "surprise"),
]


class TestInput:
    @pytest.mark.parametrize(("change", "field"), BAD_CREATES)
    def test_bad_create_is_400_naming_the_field(
        self, watches: Watches, workspace: uuid.UUID, change: dict[str, object], field: str
    ) -> None:
        body = {
            "workspace_id": str(workspace),
            "url": URL,
            "kind": "url_text",
            "interval_seconds": 3600,
        }
        error = check_envelope(watches.call("POST", json=body | change), 400, "invalid_input")
        assert error["field"] == field, error

    def test_missing_interval_is_400(self, watches: Watches, workspace: uuid.UUID) -> None:
        body = {"workspace_id": str(workspace), "url": URL, "kind": "url_text"}
        error = check_envelope(watches.call("POST", json=body), 400, "invalid_input")
        assert error["field"] == "interval_seconds"

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"interval_seconds": 120}, "interval_seconds"),
            ({"interval_seconds": None}, "interval_seconds"),
            ({"url": "https://"}, "url"),
            ({"url": None}, "url"),
            ({"enabled": None}, "enabled"),
            ({}, None),
        ],
    )
    def test_bad_update_is_400(
        self, watches: Watches, workspace: uuid.UUID, body: dict[str, object], field: str | None
    ) -> None:
        watch = watches.create(workspace, URL)
        error = check_envelope(
            watches.call("PATCH", f"/{watch['id']}", json=body), 400, "invalid_input"
        )
        assert error.get("field") == field
        assert watches.call("GET", f"/{watch['id']}").json() == {"watch": watch}

    def test_unknown_and_malformed_ids(self, watches: Watches) -> None:
        """An unknown id is 404 on every route by id; a malformed one is 400."""
        for method, kwargs in (("GET", {}), ("PATCH", {"json": {"enabled": True}}), ("DELETE", {})):
            check_envelope(watches.call(method, f"/{uuid.uuid4()}", **kwargs), 404, "not_found")
            check_envelope(watches.call(method, "/not-a-uuid", **kwargs), 400, "invalid_input")


class TestIsolation:
    def test_another_workspaces_watch_is_404(
        self, http: object, watches: Watches, workspace: uuid.UUID
    ) -> None:
        """Another key's workspace: every route by id answers 404, and list shows nothing."""
        watch = watches.create(workspace, URL)
        other = Watches(http, make_key([uuid.uuid4()]))
        for method, kwargs in (
            ("GET", {}),
            ("PATCH", {"json": {"enabled": False}}),
            ("DELETE", {}),
        ):
            check_envelope(other.call(method, f"/{watch['id']}", **kwargs), 404, "not_found")
        assert other.call("GET").json() == {"watches": []}
        check_envelope(
            other.call("GET", params={"workspace_id": str(workspace)}), 403, "not_entitled"
        )
        body = {"workspace_id": str(workspace), "url": URL, "kind": "url_text"}
        check_envelope(
            other.call("POST", json={**body, "interval_seconds": 300}), 403, "not_entitled"
        )
        assert watches.call("GET", f"/{watch['id']}").json() == {"watch": watch}

    def test_no_key_and_wrong_scope(self, http: object, workspace: uuid.UUID) -> None:
        check_envelope(Watches(http, "nope").call("GET"), 401, "not_entitled")
        reader = Watches(http, make_key([workspace], scopes=("other:scope",)))
        check_envelope(reader.call("GET"), 403, "not_entitled")
