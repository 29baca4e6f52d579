"""The webhook routes: create, list, get, update, rotate, delete; input checks; isolation."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import Env
from tests.support.factories import check_envelope, make_key
from tests.webhooks.support import Hooks

#: A public name on a port the test settings allow (EVIDENCE_FETCH_ALLOWED_PORTS).
PUBLIC = ""


@pytest.fixture(autouse=True)
def _public(env: Env) -> None:
    global PUBLIC
    PUBLIC = f"https://hooks.example.org:{env.receiver.port}/evidence"


@pytest.fixture
def hooks(http: object, workspace: uuid.UUID) -> Hooks:
    return Hooks(http, make_key([workspace]))


class TestEndpoints:
    def test_create_answers_the_secret_once(self, hooks: Hooks, workspace: uuid.UUID) -> None:
        """The secret is in the create answer only: never in get or list."""
        created = hooks.create(workspace, PUBLIC, description="ops")
        assert created["secret"].startswith("whsec_")
        webhook = created["webhook"]
        assert webhook["events"] == ["retrieval.settled"]
        assert webhook["enabled"] is True and webhook["description"] == "ops"
        got = hooks.call("GET", f"/{webhook['id']}")
        assert got.status_code == 200 and got.json() == {"webhook": webhook}
        assert created["secret"] not in got.text and '"secret"' not in got.text
        listed = hooks.call("GET", params={"workspace_id": str(workspace)}).json()
        assert listed == {"webhooks": [webhook]}
        assert created["secret"] not in hooks.call("GET").text

    def test_update_disable_enable_and_delete(self, hooks: Hooks, workspace: uuid.UUID) -> None:
        """PATCH changes only what it names; DELETE makes it a 404."""
        webhook_id = hooks.create(workspace, PUBLIC)["webhook"]["id"]
        changed = hooks.call("PATCH", f"/{webhook_id}", json={"enabled": False})
        assert changed.status_code == 200 and changed.json()["webhook"]["enabled"] is False
        changed = hooks.call(
            "PATCH", f"/{webhook_id}", json={"enabled": True, "description": "back"}
        )
        assert changed.json()["webhook"]["enabled"] is True
        assert changed.json()["webhook"]["description"] == "back"
        assert hooks.call("DELETE", f"/{webhook_id}").status_code == 204
        check_envelope(hooks.call("GET", f"/{webhook_id}"), 404, "not_found")

    def test_rotate_gives_a_new_secret_and_a_grace(
        self, hooks: Hooks, workspace: uuid.UUID
    ) -> None:
        """Rotation answers a new secret; the old one's grace shows as an instant."""
        created = hooks.create(workspace, PUBLIC)
        rotated = hooks.call("POST", f"/{created['webhook']['id']}/rotate-secret")
        assert rotated.status_code == 200
        assert rotated.json()["secret"].startswith("whsec_")
        assert rotated.json()["secret"] != created["secret"]
        assert rotated.json()["webhook"]["previous_secret_expires_at"] is not None


class TestIsolation:
    def test_another_workspaces_endpoint_is_404(
        self, http: object, hooks: Hooks, workspace: uuid.UUID
    ) -> None:
        """Another key's workspace: every route by id answers 404, and list shows nothing."""
        webhook_id = hooks.create(workspace, PUBLIC)["webhook"]["id"]
        other = Hooks(http, make_key([uuid.uuid4()]))
        for method, path in [
            ("GET", f"/{webhook_id}"),
            ("PATCH", f"/{webhook_id}"),
            ("DELETE", f"/{webhook_id}"),
            ("POST", f"/{webhook_id}/rotate-secret"),
            ("GET", f"/{webhook_id}/deliveries"),
            ("POST", f"/{webhook_id}/deliveries/{uuid.uuid4()}/redeliver"),
        ]:
            kwargs = {"json": {"enabled": False}} if method == "PATCH" else {}
            check_envelope(other.call(method, path, **kwargs), 404, "not_found")
        assert other.call("GET").json() == {"webhooks": []}
        check_envelope(
            other.call("GET", params={"workspace_id": str(workspace)}), 403, "not_entitled"
        )
        assert hooks.call("GET", f"/{webhook_id}").json()["webhook"]["enabled"] is True

    def test_creating_for_another_workspace_is_403(self, hooks: Hooks) -> None:
        body = {"workspace_id": str(uuid.uuid4()), "url": PUBLIC, "events": ["retrieval.settled"]}
        check_envelope(hooks.call("POST", json=body), 403, "not_entitled")


class TestBadInput:
    @pytest.mark.parametrize(
        ("url", "why"),
        [
            ("http://hooks.example.org/x", "scheme"),
            ("https://10.0.0.5/x", "private"),
            ("https://169.254.169.254/latest", "metadata"),
            ("https://[::1]/x", "loopback"),
            ("https://user:pw@hooks.example.org/x", "userinfo"),
            ("https://hooks.example.org:8443/x", "port"),
            ("https://intranet/x", "single label"),
            ("https://hooks.example.org/" + "a" * 2100, "too long"),
            ("", "empty"),
            ("not a url", "garbage"),
        ],
    )
    def test_bad_urls_are_400_naming_url(
        self, hooks: Hooks, workspace: uuid.UUID, url: str, why: str
    ) -> None:
        body = {"workspace_id": str(workspace), "url": url, "events": ["retrieval.settled"]}
        error = check_envelope(hooks.call("POST", json=body), 400, "invalid_input")
        assert error["field"] == "url", (why, error)

    @pytest.mark.parametrize(
        ("host", "fault"),
        [
            ("１２７.０.０.２", "127.0.0.2 is loopback"),
            ("127。0。0。2", "127.0.0.2 is loopback"),
            ("localhost", "localhost is not a public host name"),
            ("LOCALHOST.", "localhost is not a public host name"),
            ("hooks.localhost", "hooks.localhost is not a public host name"),
        ],
    )
    def test_hosts_read_as_a_browser_reads_them(
        self, hooks: Hooks, workspace: uuid.UUID, env: Env, host: str, fault: str
    ) -> None:
        """Fullwidth digits, ideographic dots and `localhost` (any case, trailing dot) are
        refused at registration and at update, on a port the service may dial, naming why."""
        url = f"https://{host}:{env.receiver.port}/evidence"
        body = {"workspace_id": str(workspace), "url": url, "events": ["retrieval.settled"]}
        error = check_envelope(hooks.call("POST", json=body), 400, "invalid_input")
        assert error["field"] == "url" and fault in error["message"], error
        webhook_id = hooks.create(workspace, PUBLIC)["webhook"]["id"]
        error = check_envelope(
            hooks.call("PATCH", f"/{webhook_id}", json={"url": url}), 400, "invalid_input"
        )
        assert error["field"] == "url" and fault in error["message"], error

    @pytest.mark.parametrize(
        ("events", "field"),
        [
            (["retrieval.created"], "events[0]"),
            ([], "events"),
            (["retrieval.settled", "retrieval.settled"], "events"),
            ("retrieval.settled", "events"),
        ],
    )
    def test_bad_events_are_400_naming_events(
        self, hooks: Hooks, workspace: uuid.UUID, events: object, field: str
    ) -> None:
        body = {"workspace_id": str(workspace), "url": PUBLIC, "events": events}
        error = check_envelope(hooks.call("POST", json=body), 400, "invalid_input")
        assert error["field"] == field, error

    def test_patch_checks_its_fields(self, hooks: Hooks, workspace: uuid.UUID) -> None:
        """A bad URL, a null, an empty body and an unknown field are each a 400 naming it."""
        webhook_id = hooks.create(workspace, PUBLIC)["webhook"]["id"]
        for body, field in [
            ({"url": "https://127.0.0.1/x"}, "url"),
            ({"enabled": None}, "enabled"),
            ({"secret": "whsec_x"}, "secret"),
        ]:
            error = check_envelope(
                hooks.call("PATCH", f"/{webhook_id}", json=body), 400, "invalid_input"
            )
            assert error["field"] == field, error
        check_envelope(hooks.call("PATCH", f"/{webhook_id}", json={}), 400, "invalid_input")

    def test_odd_ids_are_400(self, hooks: Hooks) -> None:
        error = check_envelope(hooks.call("GET", "/not-a-uuid"), 400, "invalid_input")
        assert error["field"] == "webhook_id"
