"""Every class of bad input gets the contract's error envelope, naming the field."""

import uuid

import pytest

from tests.support.factories import Api, body, check_envelope, make_key

URL = "https://example.org/page"


class TestBadBodies:
    """POST /research-api/evidence/retrieve refuses malformed bodies with 400 invalid_input."""

    @pytest.mark.parametrize(
        ("change", "field"),
        [
            ({"extra": 1}, "extra"),
            ({"url": None}, "url"),
            ({"url": 5}, "url"),
            ({"url": "not a uri"}, "url"),
            ({"url": "https://exa mple.org/"}, "url"),
            ({"url": "https://example.org/" + "a" * 2100}, "url"),
            ({"url": "https://example.org/%zz"}, "url"),
            ({"url": ""}, "url"),
            ({"kind": "video"}, "kind"),
            ({"kind": None}, "kind"),
            ({"language": "e"}, "language"),
            ({"language": "en_US"}, "language"),
            ({"language": "x" * 40}, "language"),
            ({"language": None}, "language"),
            ({"language": 7}, "language"),
            ({"workspace_id": "not-a-uuid"}, "workspace_id"),
            ({"workspace_id": "11111111111141118111111111111111"}, "workspace_id"),
            ({"mutation_id": "1234"}, "mutation_id"),
            ({"mutation_id": 12}, "mutation_id"),
        ],
    )
    def test_bad_field(self, api: Api, workspace: uuid.UUID, change: dict, field: str) -> None:
        """A wrong, unknown or over-long field answers 400 naming that field."""
        payload = {**body(URL, workspace), **change}
        error = check_envelope(api.post(payload), 400, "invalid_input")
        assert error["field"] == field

    @pytest.mark.parametrize("missing", ["url", "kind", "workspace_id", "mutation_id"])
    def test_missing_required(self, api: Api, workspace: uuid.UUID, missing: str) -> None:
        """A missing required field answers 400 naming it."""
        payload = body(URL, workspace)
        del payload[missing]
        error = check_envelope(api.post(payload), 400, "invalid_input")
        assert error["field"] == missing

    @pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'"text"', b""])
    def test_not_an_object(self, api: Api, raw: bytes) -> None:
        """A body that is not a JSON object answers 400 invalid_input."""
        response = api.client.post(
            "/research-api/evidence/retrieve",
            content=raw,
            headers={**api.headers, "Content-Type": "application/json"},
        )
        check_envelope(response, 400, "invalid_input")

    def test_nothing_recorded_for_bad_input(self, api: Api, workspace: uuid.UUID) -> None:
        """A refused body records nothing: the same mutation_id can then be used validly."""
        payload = body(URL, workspace)
        check_envelope(api.post({**payload, "kind": "nope"}), 400, "invalid_input")
        assert api.post(payload).status_code == 202

    def test_bad_path_ids(self, api: Api) -> None:
        """A malformed retrieval or evidence id answers 400; an unknown one 404."""
        check_envelope(api.get("not-a-uuid"), 400, "invalid_input")
        check_envelope(api.get(str(uuid.uuid4())), 404, "not_found")
        check_envelope(api.evidence(str(uuid.uuid4())), 404, "not_found")
        check_envelope(api.cancel(str(uuid.uuid4())), 404, "not_found")

    def test_unknown_route(self, api: Api) -> None:
        """An unknown route answers 404 in the envelope."""
        check_envelope(api.client.get("/nowhere"), 404, "not_found")


class TestAuth:
    """Bearer keys: scope agent:research and workspace access."""

    def test_missing_key(self, api: Api, workspace: uuid.UUID) -> None:
        """No Authorization header answers 401 not_entitled."""
        response = api.client.post("/research-api/evidence/retrieve", json=body(URL, workspace))
        check_envelope(response, 401, "not_entitled")

    @pytest.mark.parametrize("header", ["Bearer evk_wrong", "Basic abc", "Bearer ", "evk_x"])
    def test_invalid_key(self, api: Api, workspace: uuid.UUID, header: str) -> None:
        """An unknown key or another scheme answers 401 not_entitled."""
        response = api.client.post(
            "/research-api/evidence/retrieve",
            json=body(URL, workspace),
            headers={"Authorization": header},
        )
        check_envelope(response, 401, "not_entitled")

    def test_other_workspace(self, api: Api) -> None:
        """A key used for a workspace it does not belong to answers 403."""
        check_envelope(api.post(body(URL, uuid.uuid4())), 403, "not_entitled")

    def test_missing_scope(self, api: Api, workspace: uuid.UUID) -> None:
        """A key without agent:research answers 403 on every retrieval route."""
        weak = Api(api.client, make_key([workspace], scopes=("other:scope",)))
        check_envelope(weak.post(body(URL, workspace)), 403, "not_entitled")
        created = api.post(body(URL, workspace)).json()["retrieval"]
        check_envelope(weak.get(created["id"]), 403, "not_entitled")

    def test_keys_are_stored_hashed(self, api: Api) -> None:
        """The database never holds a key in plain text."""
        import sqlalchemy as sa

        from worker.store import db

        with db.session_scope() as session:
            stored = session.execute(sa.text("SELECT key_hash, prefix FROM api_key")).all()
        assert stored
        assert all(api.key != h and len(h) == 64 for h, _ in stored)
        assert all(not api.key.startswith(h) for h, _ in stored)
