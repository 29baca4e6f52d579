"""The documentation routes and liveness the contract lists."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.http.app import app

ROUTES = [
    ("post", "/research-api/evidence/retrieve"),
    ("post", "/research-api/evidence/retrieve/batch"),
    ("post", "/research-api/evidence/retrievals/batch-get"),
    ("get", "/research-api/evidence/retrievals/{retrieval_id}"),
    ("post", "/research-api/evidence/retrievals/{retrieval_id}/cancel"),
    ("get", "/research-api/evidence/{evidence_id}"),
    ("post", "/research-api/chunks/search"),
    ("post", "/research-api/chunks/get"),
    ("post", "/research-api/images/search"),
    ("post", "/research-api/images/get"),
    ("post", "/research-api/briefs/get"),
    ("post", "/research-api/briefs/create"),
    ("post", "/research-api/briefs/revise"),
    ("post", "/research-api/briefs/review"),
    ("post", "/research-api/briefs/archive"),
    ("get", "/healthz"),
    ("get", "/readyz"),
]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    # Not entered as a context manager: these routes need no lifespan (warm-up, frozen heap).
    client = TestClient(app)
    yield client
    client.close()


class TestDocs:
    """GET /openapi.json and /docs describe every contract route."""

    def test_openapi_lists_every_route(self, client: TestClient) -> None:
        """Each contract route (docs/api.md, docs/read-side.md) is in OpenAPI with its method."""
        document = client.get("/openapi.json").json()
        for method, path in ROUTES:
            assert method in document["paths"].get(path, {}), (method, path)

    def test_retrieve_documents_its_body(self, client: TestClient) -> None:
        """The retrieve body schema names the contract's fields and forbids others."""
        document = client.get("/openapi.json").json()
        schema = document["components"]["schemas"]["RetrieveRequest"]
        assert set(schema["properties"]) == {
            "url",
            "kind",
            "language",
            "workspace_id",
            "mutation_id",
        }
        assert set(schema["required"]) == {"url", "kind", "workspace_id", "mutation_id"}
        assert schema.get("additionalProperties") is False

    def test_batch_routes_document_their_schemas(self, client: TestClient) -> None:
        """The batch routes name their request bodies and 200 answers; items are retrieve
        bodies and retrievals are the contract's retrieval object."""
        document = client.get("/openapi.json").json()
        schemas = document["components"]["schemas"]

        def schema_of(ref: dict) -> dict:
            return schemas[ref["$ref"].rsplit("/", 1)[1]]

        paths = document["paths"]
        batch = paths["/research-api/evidence/retrieve/batch"]["post"]
        body = schema_of(batch["requestBody"]["content"]["application/json"]["schema"])
        assert body["required"] == ["items"] and body.get("additionalProperties") is False
        items = body["properties"]["items"]
        assert items["maxItems"] == 1000
        assert items["items"]["anyOf"][0]["$ref"].endswith("/RetrieveRequest")
        answer = schema_of(batch["responses"]["200"]["content"]["application/json"]["schema"])
        result = schema_of(answer["properties"]["results"]["items"])
        assert set(result["properties"]) == {"status", "retrieval", "error"}
        read = paths["/research-api/evidence/retrievals/batch-get"]["post"]
        body = schema_of(read["requestBody"]["content"]["application/json"]["schema"])
        assert body["properties"]["ids"]["maxItems"] == 1000
        answer = schema_of(read["responses"]["200"]["content"]["application/json"]["schema"])
        retrieval = answer["properties"]["retrievals"]["items"]["anyOf"][0]
        assert set(schema_of(retrieval)["properties"]) >= {"id", "state", "result", "evidence"}
        # A quota refuses an item (429 in its result), never the whole batch.
        assert 429 in result["properties"]["status"]["enum"] and "429" not in batch["responses"]
        get = paths["/research-api/evidence/retrievals/{retrieval_id}"]["get"]
        assert {"name": "prefer", "in": "header"}.items() <= get["parameters"][1].items()

    def test_docs_page(self, client: TestClient) -> None:
        """The interactive docs page is served."""
        response = client.get("/docs")
        assert response.status_code == 200 and "openapi.json" in response.text

    def test_healthz(self, client: TestClient) -> None:
        """Liveness answers without touching the database or broker."""
        assert client.get("/healthz").json() == {"status": "ok"}
