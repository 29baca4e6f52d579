"""/openapi.json describes what the API does; /docs and /redoc work without internet."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator, FormatChecker

from api.http.app import app
from tests.support.factories import Api, check_envelope
from worker import contract as contract_files

#: Body-less operations, and operations that answer 404 / 409 besides the common errors.
ID_ROUTES = {
    ("get", "/research-api/evidence/retrievals/{retrieval_id}"),
    ("post", "/research-api/evidence/retrievals/{retrieval_id}/cancel"),
    ("get", "/research-api/evidence/{evidence_id}"),
    ("get", "/research-api/evidence/{evidence_id}/diff"),
    ("post", "/research-api/evidence/quotes/verify"),
    ("get", "/research-api/evidence/memento/{workspace_id}/timemap/{url}"),
    ("get", "/research-api/evidence/memento/{workspace_id}/timegate/{url}"),
    ("get", "/research-api/evidence/{evidence_id}/raw"),
    ("post", "/research-api/evidence/exports"),
}
#: Routes admitted by the workspace's read rate (or, for diffs, its diffs at once): 429 too.
READS = {
    ("get", "/research-api/evidence/retrievals/{retrieval_id}"),
    ("post", "/research-api/evidence/retrievals/batch-get"),
    ("get", "/research-api/evidence/{evidence_id}"),
    ("get", "/research-api/evidence/{evidence_id}/diff"),
    ("post", "/research-api/evidence/quotes/verify"),
    ("post", "/research-api/chunks/search"),
    ("post", "/research-api/chunks/get"),
    ("post", "/research-api/images/search"),
    ("post", "/research-api/briefs/get"),
    ("get", "/research-api/evidence/memento/{workspace_id}/timemap/{url}"),
    ("get", "/research-api/evidence/memento/{workspace_id}/timegate/{url}"),
    ("get", "/research-api/evidence/{evidence_id}/raw"),
    ("post", "/research-api/evidence/exports"),
}
#: Webhook routes that answer 409: too many endpoints; a redelivery while an attempt is in flight.
WEBHOOK_CONFLICTS = {
    ("post", "/research-api/webhooks"),
    ("post", "/research-api/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver"),
    ("post", "/research-api/watches"),
}
CONTRACT_BODIES = {
    # (method, path): (request component, contract file, success component, contract file)
    ("post", "/research-api/evidence/retrieve"): (
        "RetrieveRequest",
        "evidence_retrieve.input",
        "RetrievalResponse",
        "evidence_retrieve.output",
    ),
    ("post", "/research-api/briefs/get"): (
        "BriefGetRequest",
        "briefs_get.input",
        "BriefResponse",
        "briefs_get.output",
    ),
    ("post", "/research-api/chunks/get"): (
        "ChunkGetRequest",
        "get_chunk.input",
        "ChunkGetResponse",
        "get_chunk.output",
    ),
    ("post", "/research-api/evidence/quotes/verify"): (
        "QuoteVerifyRequest",
        "quotes_verify.input",
        "QuoteVerifyResponse",
        "quotes_verify.output",
    ),
    ("post", "/research-api/images/get"): (
        "ImageGetRequest",
        "get_image.input",
        "ImageGetResponse",
        "get_image.output",
    ),
}
#: Request bodies whose contract schemas allow unknown fields.
OPEN_BODIES = {"ChunkGetRequest", "ImageGetRequest"}
#: Opaque (non-UUID) ids.
OPAQUE_IDS = {"chunk_id", "image_id"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def document(client: TestClient) -> dict[str, Any]:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    return response.json()


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def _contract(name: str) -> dict[str, Any]:
    schema = contract_files.load(f"{name}.json")
    schema.pop("$schema", None)
    schema.pop("x-fastmcp-wrap-result", None)
    return schema


def _component(document: dict[str, Any], ref: str) -> dict[str, Any]:
    kind, name = ref.split("/")[-2:]
    return document["components"][kind][name]


def _validator(document: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """Validate against `schema`, resolving its `#/components/...` refs in the document."""
    return Draft202012Validator({**document, **schema}, format_checker=FormatChecker())


def _walk(schema: Any, document: dict[str, Any], seen: set[str]) -> Iterator[tuple[str, Any]]:
    """(property name, schema) of every property under `schema`, following refs once."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref not in seen:
            seen.add(ref)
            yield from _walk(_component(document, ref), document, seen)
        for name, sub in schema.get("properties", {}).items():
            yield name, sub
            yield from _walk(sub, document, seen)
        for key in ("items", "anyOf", "oneOf", "allOf"):
            value = schema.get(key)
            for sub in value if isinstance(value, list) else [value] if value else []:
                yield from _walk(sub, document, seen)


def _is_uuid(schema: dict[str, Any]) -> bool:
    if schema.get("format") == "uuid":
        return True
    branches = [s for s in schema.get("anyOf", []) if s.get("type") != "null"]
    return bool(branches) and all(_is_uuid(s) for s in branches)


class TestDocument:
    """The document's shapes are the API's."""

    def test_no_validation_error_shape(self, document: dict[str, Any]) -> None:
        """No 422 and no `{"detail": …}`: the API answers neither."""
        text = json.dumps(document)
        assert '"422"' not in text and "HTTPValidationError" not in text
        assert "ValidationError" not in document["components"]["schemas"]
        assert '"detail"' not in text

    def test_bodies_are_the_contract_schemas(self, document: dict[str, Any]) -> None:
        """Routes with contract files take and answer exactly those schemas."""
        for (method, path), names in CONTRACT_BODIES.items():
            request_name, request_file, answer_name, answer_file = names
            operation = document["paths"][path][method]
            body = operation["requestBody"]["content"]["application/json"]["schema"]
            assert body == {"$ref": f"#/components/schemas/{request_name}"}
            answers = [
                r["content"]["application/json"]["schema"]
                for status, r in operation["responses"].items()
                if status.startswith("2")
            ]
            assert answers and all(
                a == {"$ref": f"#/components/schemas/{answer_name}"} for a in answers
            )
            for name, contract in ((request_name, request_file), (answer_name, answer_file)):
                documented = dict(document["components"]["schemas"][name])
                documented.pop("description", None)
                assert documented == _contract(contract), name

    def test_retrieve_answers_202_and_200_with_retry_after(self, document: dict[str, Any]) -> None:
        """The created (202) and replayed (200) answers are retrievals, with the poll advice."""
        responses = document["paths"]["/research-api/evidence/retrieve"]["post"]["responses"]
        for status in ("200", "202"):
            media = responses[status]["content"]["application/json"]
            assert media["schema"] == {"$ref": "#/components/schemas/RetrievalResponse"}
            assert "Retry-After" in responses[status]["headers"]

    def test_errors_are_the_envelope(self, document: dict[str, Any]) -> None:
        """Each error status a route can answer is documented, always as the envelope."""
        for method, path, operation in _operations(document):
            responses = operation["responses"]
            errors = {s for s in responses if s[0] in "45"}
            if path in ("/healthz", "/readyz"):
                assert errors <= {"503"}
                continue
            expected = {"400", "401", "403", "500", "503"}
            if "requestBody" in operation:
                expected.add("413")
            if (method, path) in ID_ROUTES or "/briefs/" in path and "create" not in path:
                expected.add("404")
            if "{webhook_id}" in path or "{watch_id}" in path:
                expected.add("404")
            if (method, path) in WEBHOOK_CONFLICTS:
                expected.add("409")
            if path.endswith("/retrieve") or "/briefs/" in path and not path.endswith("/get"):
                expected.add("409")
            if path.endswith(("/images/get", "/evidence/retrieve")) or (method, path) in READS:
                expected.add("429")  # an image-fetch slot, or a workspace quota (reads too)
            assert errors == expected, (method, path)
            for status in errors:
                response = _component(document, responses[status]["$ref"])
                media = response["content"]["application/json"]
                assert media["schema"] == {"$ref": "#/components/schemas/Error"}
                assert _validator(document, media["schema"]).is_valid(media["example"])
                if status in ("429", "503"):
                    assert response["headers"]["Retry-After"]["required"] is True
        error = document["components"]["schemas"]["Error"]
        assert error["required"] == ["error"] and error["additionalProperties"] is False
        codes = error["properties"]["error"]["properties"]["code"]["enum"]
        assert {"invalid_input", "not_entitled", "not_found", "payload_too_large"} <= set(codes)
        assert {"rate_limited", "upstream_unavailable", "internal"} <= set(codes)

    def test_bearer_on_every_protected_route(self, document: dict[str, Any]) -> None:
        """An HTTP Bearer scheme, required by every /research-api route and no other."""
        scheme = document["components"]["securitySchemes"]["bearer"]
        assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
        for _method, path, operation in _operations(document):
            expected = [{"bearer": []}] if path.startswith("/research-api/") else []
            assert operation["security"] == expected, path
            names = {p["name"].lower() for p in operation.get("parameters", [])}
            assert "authorization" not in names, path  # the scheme, not a plain header

    def test_ids_are_uuids(self, document: dict[str, Any]) -> None:
        """Every id a route takes (path or body) is documented as a UUID, not a plain string."""
        checked = 0
        for _method, path, operation in _operations(document):
            for parameter in operation.get("parameters", []):
                if parameter["name"].endswith("_id"):
                    assert _is_uuid(parameter["schema"]), (path, parameter)
                    checked += 1
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is None:
                continue
            for name, schema in _walk(body["schema"], document, set()):
                if (name == "id" or name.endswith("_id")) and name not in OPAQUE_IDS:
                    assert _is_uuid(schema), (path, name, schema)
                    checked += 1
        assert checked >= 20

    def test_bodies_are_closed_except_two(self, document: dict[str, Any]) -> None:
        """Request bodies forbid unknown fields, except chunks/get's and images/get's."""
        for _method, path, operation in _operations(document):
            if "requestBody" not in operation:
                continue
            ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            name = ref.split("/")[-1]
            schema = document["components"]["schemas"][name]
            if name in OPEN_BODIES:
                assert "additionalProperties" not in schema, path
                assert "Unknown fields are ignored" in schema["description"], path
            else:
                assert schema["additionalProperties"] is False, path
        assert "chunks/get" in document["info"]["description"]

    def test_examples_match_their_schemas(self, document: dict[str, Any]) -> None:
        """Every request and answer example validates against its own schema."""
        count = 0
        for method, path, operation in _operations(document):
            media = operation.get("requestBody", {}).get("content", {}).get("application/json")
            pairs = [media] if media else []
            pairs += [
                r["content"]["application/json"]
                for s, r in operation["responses"].items()
                if s.startswith("2") and "application/json" in r.get("content", {})
            ]
            for item in pairs:
                if "example" in item:
                    errors = list(_validator(document, item["schema"]).iter_errors(item["example"]))
                    assert not errors, (method, path, [e.message for e in errors])
                    count += 1
        assert count >= 25

    def test_examples_come_from_the_contract(self, document: dict[str, Any]) -> None:
        """Where the contract has example files, those are the examples."""
        for route, name in (
            ("/research-api/evidence/retrieve", "evidence_retrieve"),
            ("/research-api/briefs/get", "briefs_get"),
        ):
            operation = document["paths"][route]["post"]
            call = contract_files.load(f"{name}.example_call.json")
            output = contract_files.load(f"{name}.example_output.json")
            body = operation["requestBody"]["content"]["application/json"]["example"]
            assert body == call["arguments"]
            assert operation["responses"]["200"]["content"]["application/json"]["example"] == (
                output
            )

    def test_links_feed_ids_to_the_next_calls(self, document: dict[str, Any]) -> None:
        """A created retrieval or brief links to the operations that take its id."""
        ids = {op["operationId"] for _m, _p, op in _operations(document)}
        created = document["paths"]["/research-api/evidence/retrieve"]["post"]["responses"]
        links = created["202"]["links"]
        assert {link["operationId"] for link in links.values()} == {
            "getRetrieval",
            "cancelRetrieval",
        }
        brief = document["paths"]["/research-api/briefs/create"]["post"]["responses"]["200"]
        targets = {link["operationId"] for link in brief["links"].values()}
        assert targets == {"getBrief", "reviseBrief", "reviewBrief", "archiveBrief"}
        assert targets <= ids


#: An id in a path; fixed, so that every test process collects the same test names.
SOME_ID = uuid.UUID("0c9f6a3e-5d1b-4f7e-9a2c-8b4d6e1f3a5c")


class TestMethodNotAllowed:
    """A method a path does not serve: 405, with `Allow`, in the envelope."""

    @pytest.mark.parametrize(
        ("method", "path", "allow"),
        [
            ("DELETE", "/research-api/evidence/retrieve", {"POST"}),
            ("GET", "/research-api/evidence/retrieve", {"POST"}),
            ("PUT", "/research-api/briefs/get", {"POST"}),
            ("POST", f"/research-api/evidence/{SOME_ID}", {"GET", "HEAD"}),  # HEAD: Memento
            ("TRACE", f"/research-api/evidence/retrievals/{SOME_ID}", {"GET"}),
            ("PATCH", "/healthz", {"GET"}),
        ],
    )
    def test_allow_and_envelope(
        self, client: TestClient, method: str, path: str, allow: set[str]
    ) -> None:
        response = client.request(method, path)
        check_envelope(response, 405, "invalid_input")
        assert {m.strip() for m in response.headers["allow"].split(",")} == allow


class _Assets(HTMLParser):
    """Every URL a page loads: scripts, styles, icons, images, and the spec it fetches."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "spec-url") and value:
                self.urls.append(value)


class TestOfflineDocs:
    """The documentation pages load nothing from another origin."""

    @pytest.mark.parametrize("page", ["/docs", "/redoc"])
    def test_assets_are_same_origin_and_served(self, client: TestClient, page: str) -> None:
        response = client.get(page)
        assert response.status_code == 200
        parser = _Assets()
        parser.feed(response.text)
        # Inline script: Swagger UI's spec URL is a JS string.
        parser.urls += re.findall(r"url: '([^']+)'", response.text)
        assert parser.urls, response.text
        for url in parser.urls:
            assert url.startswith("/") and not url.startswith("//"), (page, url)
            asset = client.get(url)
            assert asset.status_code == 200, (page, url)
            assert asset.content, (page, url)
        assert "/openapi.json" in parser.urls
        assert not re.search(r"https?://|//cdn|fonts\.googleapis", response.text)
        scripts = [u for u in parser.urls if u.endswith(".js")]
        assert scripts and all(len(client.get(u).content) > 100_000 for u in scripts)

    def test_swagger_sends_nothing_to_a_validator(self, client: TestClient) -> None:
        """Swagger UI's online validator badge is off (it posts the document elsewhere)."""
        assert '"validatorUrl": null' in client.get("/docs").text


class TestBehaviourMatches:
    """What the document now says, the API does."""

    def test_integral_number_is_an_integer(self, api: Api, workspace: uuid.UUID) -> None:
        """JSON Schema's `integer` includes 2.0: a revision sent as 1.0 is revision 1."""
        content = {
            "title": "t",
            "question": "q",
            "summary": "",
            "findings": [],
            "angles": [],
            "notes": "",
            "project_id": None,
            "project_revision": None,
            "corpus_snapshot_id": None,
            "language": "en",
        }
        headers = api.headers
        created = api.client.post(
            "/research-api/briefs/create",
            json={"workspace_id": str(workspace), "content": content},
            headers=headers,
        )
        assert created.status_code == 200, created.text
        ids = {"workspace_id": str(workspace), "id": created.json()["brief"]["id"]}
        got = api.client.post(
            "/research-api/briefs/get", json={**ids, "revision": 1.0}, headers=headers
        )
        assert got.status_code == 200, got.text
        assert got.json()["brief"]["revision"] == 1
        search = {"workspace_id": str(workspace), "query": "nothing", "limit": 5.0}
        found = api.client.post("/research-api/chunks/search", json=search, headers=headers)
        assert found.status_code == 200, found.text
        for bad in ("1", 1.5, True):
            refused = api.client.post(
                "/research-api/briefs/get", json={**ids, "revision": bad}, headers=headers
            )
            assert check_envelope(refused, 400, "invalid_input")["field"] == "revision"

    def test_long_opaque_id_is_a_miss(self, api: Api) -> None:
        """chunk_id and image_id have no maximum length in the contract: a long one is a miss."""
        for route, body, key in (
            ("chunks/get", {"chunk_id": "ch_" + "x" * 5_000}, "chunk"),
            ("images/get", {"image_id": "im_" + "x" * 5_000}, "image"),
        ):
            response = api.client.post(f"/research-api/{route}", json=body, headers=api.headers)
            assert response.status_code == 200, response.text
            assert response.json()["result"][key] is None

    def test_open_bodies_ignore_unknown_fields(self, api: Api) -> None:
        """chunks/get and images/get accept unknown fields, as their contract schemas allow."""
        for route, body in (
            ("chunks/get", {"chunk_id": "ch_none"}),
            ("images/get", {"image_id": "im_none"}),
        ):
            response = api.client.post(
                f"/research-api/{route}", json={**body, "extra": 1}, headers=api.headers
            )
            assert response.status_code == 200, response.text
        response = api.client.post(
            "/research-api/briefs/get",
            json={"workspace_id": str(uuid.uuid4()), "id": str(uuid.uuid4()), "extra": 1},
            headers=api.headers,
        )
        assert check_envelope(response, 400, "invalid_input")["field"] == "extra"
