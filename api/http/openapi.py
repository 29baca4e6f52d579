"""The OpenAPI document at /openapi.json: what each route accepts and answers, as it does.

FastAPI's own document came from the route signatures and described answers the API never
gives (422 `{"detail": …}`, an untyped 202). Here every operation is described from a table:
its body and answers are the contract's schemas (`api.http.openapi_schemas`), every error is the
envelope with the statuses the route can really answer, and protected routes name the Bearer
scheme. A route missing from the table fails the document's construction, so none goes
undocumented.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from api.http.deps import BEARER_SCHEME as BEARER
from api.http.openapi_archive import archive_operations
from api.http.openapi_archive import describe as describe_archive
from api.http.openapi_examples import examples
from api.http.openapi_links import brief_links, retrieval_links, webhook_links
from api.http.openapi_memento import describe, memento_operations
from api.http.openapi_schemas import components
from api.http.openapi_watches import watch_operations

#: What each error status means here; its body is always the envelope (`Error`).
ERRORS: dict[int, tuple[str, str, str]] = {
    400: (
        "invalid_input",
        "The request is malformed: the message names the problem.",
        "BadRequest",
    ),
    401: ("not_entitled", "No valid Bearer API key was sent.", "Unauthorized"),
    403: ("not_entitled", "The key lacks the scope, or the workspace is not its.", "Forbidden"),
    404: ("not_found", "No such thing in the key's workspaces.", "NotFound"),
    409: ("invalid_input", "The request conflicts with what is stored.", "Conflict"),
    413: ("invalid_input", "The request body is larger than the API accepts.", "PayloadTooLarge"),
    429: (
        "rate_limited",
        "Over one of the workspace's quotas (code `rate_limited`: its write rate, open "
        "retrievals, read rate or diffs at once), or, on `images/get`, too many "
        "image fetches for this key at once (code `upstream_unavailable`, `details.reason` "
        "`rate_limited`); see Retry-After.",
        "TooManyRequests",
    ),
    500: ("internal", "An unexpected error; nothing about it is disclosed.", "InternalError"),
    503: (
        "upstream_unavailable",
        "A dependency is unavailable; see Retry-After.",
        "ServiceUnavailable",
    ),
}
#: Statuses whose answers carry Retry-After.
RETRY_STATUSES = frozenset({429, 503})
#: Every protected route can answer these.
COMMON_ERRORS = (400, 401, 403, 500, 503)


@dataclass(frozen=True)
class Operation:
    """How one route is documented."""

    operation_id: str
    #: Component of the JSON request body, if the route takes one.
    body: str | None
    #: Success status → (component of the body, description).
    answers: dict[int, tuple[str, str]]
    #: Error statuses besides COMMON_ERRORS.
    errors: tuple[int, ...] = ()
    body_example: dict[str, Any] | None = None
    answer_example: dict[str, Any] | None = None
    #: Success answers may carry Retry-After (an open retrieval's poll advice).
    poll_advice: bool = False
    protected: bool = True
    #: Statuses that do not apply, out of COMMON_ERRORS.
    without: tuple[int, ...] = field(default=())
    #: OpenAPI links of the success answers: the operations their ids feed.
    links: dict[str, Any] | None = None


def _body_and_answer(
    example: tuple[dict[str, Any], dict[str, Any]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A brief route's (request body, answer) example: typed, so it fills just those two fields."""
    return example


def operations() -> dict[tuple[str, str], Operation]:
    """Every documented route, by (method, path)."""
    ex = examples()
    retrieval = ("RetrievalResponse", "The retrieval as it stands.")
    brief = ("BriefResponse", "The brief as the request left it.")
    revision = ("EvidenceResponse", "The evidence revision (a memento when named).")
    links = brief_links()
    evidence = "/research-api/evidence"
    return {
        ("post", f"{evidence}/retrieve"): Operation(
            "retrieve",
            "RetrieveRequest",
            {
                202: ("RetrievalResponse", "Recorded; a worker will fetch it. Poll it by id."),
                200: ("RetrievalResponse", "This mutation_id was used before: that retrieval."),
            },
            (409, 413, 429),
            ex["retrieve"],
            ex["retrieval"],
            poll_advice=True,
            links=retrieval_links(),
        ),
        ("post", f"{evidence}/retrieve/batch"): Operation(
            "retrieveBatch",
            "BatchRetrieveRequest",
            {200: ("BatchRetrieveResponse", "One result per item, in the order of the items.")},
            (413,),
        ),
        ("post", f"{evidence}/retrievals/batch-get"): Operation(
            "getRetrievalsBatch",
            "BatchGetRequest",
            {200: ("BatchGetResponse", "One retrieval per id, in order; null when unknown.")},
            (413, 429),
        ),
        ("get", f"{evidence}/retrievals/{{retrieval_id}}"): Operation(
            "getRetrieval",
            None,
            {200: retrieval},
            (404, 429),
            None,
            ex["retrieval"],
            poll_advice=True,
        ),
        ("post", f"{evidence}/retrievals/{{retrieval_id}}/cancel"): Operation(
            "cancelRetrieval",
            None,
            {200: retrieval},
            (404,),
            None,
            ex["retrieval"],
            poll_advice=True,
        ),
        ("get", f"{evidence}/{{evidence_id}}"): Operation(
            "getEvidence", None, {200: revision}, (404, 429), None, ex["evidence"]
        ),
        ("get", f"{evidence}/{{evidence_id}}/diff"): Operation(
            "diffEvidence",
            None,
            {200: ("EvidenceDiffResponse", "What changed from revision `from` to `to`.")},
            (404, 429),
            None,
            ex["evidence_diff"],
        ),
        ("post", f"{evidence}/quotes/verify"): Operation(
            "verifyQuotes",
            "QuoteVerifyRequest",
            {200: ("QuoteVerifyResponse", "One answer per quote, in the order asked.")},
            (404, 413, 429),
            ex["quotes_verify"],
            ex["quotes"],
        ),
        ("post", "/research-api/chunks/search"): Operation(
            "searchChunks",
            "ChunkSearchRequest",
            {200: ("ChunkSearchResponse", "Matching passages, best first (none is `[]`).")},
            (413, 429),
            ex["chunk_search"],
            ex["chunks"],
        ),
        ("post", "/research-api/chunks/get"): Operation(
            "getChunk",
            "ChunkGetRequest",
            {200: ("ChunkGetResponse", "The passage, or a null chunk when there is none.")},
            (413, 429),
            ex["chunk_get"],
            ex["chunk"],
        ),
        ("post", "/research-api/images/search"): Operation(
            "searchImages",
            "ImageSearchRequest",
            {200: ("ImageSearchResponse", "Matching images, best first (none is `[]`).")},
            (413, 429),
            ex["image_search"],
            ex["images"],
        ),
        ("post", "/research-api/images/get"): Operation(
            "getImage",
            "ImageGetRequest",
            {200: ("ImageGetResponse", "The image, or a null image when there is none.")},
            (413, 429),
            ex["image_get"],
            ex["image"],
        ),
        ("post", "/research-api/briefs/get"): Operation(
            "getBrief",
            "BriefGetRequest",
            {200: brief},
            (404, 413, 429),
            *_body_and_answer(ex["brief_get"]),
            links=links,
        ),
        ("post", "/research-api/briefs/create"): Operation(
            "createBrief",
            "BriefCreateRequest",
            {200: brief},
            (409, 413),
            *_body_and_answer(ex["brief_create"]),
            links=links,
        ),
        ("post", "/research-api/briefs/revise"): Operation(
            "reviseBrief",
            "BriefReviseRequest",
            {200: brief},
            (404, 409, 413),
            *_body_and_answer(ex["brief_revise"]),
            links=links,
        ),
        ("post", "/research-api/briefs/review"): Operation(
            "reviewBrief",
            "BriefReviewRequest",
            {200: brief},
            (404, 409, 413),
            *_body_and_answer(ex["brief_review"]),
            links=links,
        ),
        ("post", "/research-api/briefs/archive"): Operation(
            "archiveBrief",
            "BriefArchiveRequest",
            {200: brief},
            (404, 409, 413),
            *_body_and_answer(ex["brief_archive"]),
            links=links,
        ),
        **_webhook_operations(),
        **{key: Operation(**spec) for key, spec in memento_operations().items()},
        **{key: Operation(**spec) for key, spec in archive_operations().items()},
        **{key: Operation(**spec) for key, spec in watch_operations().items()},
        ("get", "/healthz"): Operation(
            "healthz",
            None,
            {200: ("Health", "The process is alive.")},
            answer_example={"status": "ok"},
            protected=False,
            without=COMMON_ERRORS,
        ),
        ("get", "/readyz"): Operation(
            "readyz",
            None,
            {
                200: ("Readiness", "The database and the broker answer."),
                503: ("Readiness", "The database or the broker does not answer; see Retry-After."),
            },
            protected=False,
            without=COMMON_ERRORS,
        ),
    }


def _webhook_operations() -> dict[tuple[str, str], Operation]:
    """The webhook routes (docs/webhooks.md)."""
    base = "/research-api/webhooks"
    one = f"{base}/{{webhook_id}}"
    webhook = ("WebhookResponse", "The endpoint (never its secret).")
    with_secret = ("WebhookSecretResponse", "The endpoint, and its signing secret: shown only now.")
    deliveries = ("WebhookDeliveryListResponse", "The deliveries, newest first.")
    return {
        ("post", base): Operation(
            "createWebhook",
            "WebhookCreateRequest",
            {201: with_secret},
            (409, 413),
            links=webhook_links(),
        ),
        ("get", base): Operation(
            "listWebhooks", None, {200: ("WebhookListResponse", "The endpoints.")}
        ),
        ("get", one): Operation("getWebhook", None, {200: webhook}, (404,)),
        ("patch", one): Operation(
            "updateWebhook", "WebhookUpdateRequest", {200: webhook}, (404, 413)
        ),
        ("delete", one): Operation("deleteWebhook", None, {204: ("", "Deleted.")}, (404,)),
        ("post", f"{one}/rotate-secret"): Operation(
            "rotateWebhookSecret", None, {200: with_secret}, (404,)
        ),
        ("get", f"{one}/deliveries"): Operation(
            "listWebhookDeliveries", None, {200: deliveries}, (404,)
        ),
        ("post", f"{one}/deliveries/{{delivery_id}}/redeliver"): Operation(
            "redeliverWebhook",
            None,
            {202: ("WebhookDeliveryResponse", "Due now; a worker sends it shortly.")},
            (404, 409),
        ),
    }


def _schema_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _retry_after(description: str) -> dict[str, Any]:
    return {"description": description, "schema": {"type": "integer", "minimum": 1}}


def _error_responses() -> dict[str, Any]:
    """One shared response per error status, with an example envelope."""
    responses = {}
    for status, (code, description, name) in ERRORS.items():
        response: dict[str, Any] = {
            "description": description,
            "content": {
                "application/json": {
                    "schema": _schema_ref("Error"),
                    "example": {"error": {"code": code, "message": description}},
                }
            },
        }
        if status in RETRY_STATUSES:
            response["headers"] = {
                "Retry-After": {
                    **_retry_after("Seconds to wait before trying again."),
                    "required": True,
                }
            }
        if status == 401:
            response["headers"] = {
                "WWW-Authenticate": {"schema": {"type": "string"}, "required": True}
            }
        responses[name] = response
    return responses


def _success(spec: Operation, status: int) -> dict[str, Any]:
    name, description = spec.answers[status]
    if not name:
        return {"description": description}
    media: dict[str, Any] = {"schema": _schema_ref(name)}
    if spec.answer_example is not None and status < 300:
        media["example"] = spec.answer_example
    response: dict[str, Any] = {"description": description, "content": {"application/json": media}}
    if spec.links and status < 300:
        response["links"] = spec.links
    if spec.poll_advice:
        advice = "While the retrieval is pending or running: seconds before polling again."
        response["headers"] = {"Retry-After": _retry_after(advice)}
    elif status == 503:
        response["headers"] = {
            "Retry-After": {**_retry_after("Seconds to wait."), "required": True}
        }
    return response


def _plain_parameter(parameter: dict[str, Any]) -> dict[str, Any]:
    """An optional query parameter is absent or a value, never JSON null: drop the null branch."""
    schema = parameter.get("schema", {})
    branches = [s for s in schema.get("anyOf", []) if s.get("type") != "null"]
    if "anyOf" in schema and len(branches) == 1:
        parameter["schema"] = {
            **{k: v for k, v in schema.items() if k != "anyOf"},
            **branches[0],
        }
    return parameter


def _describe(operation: dict[str, Any], spec: Operation) -> None:
    """Replace FastAPI's guesses in one operation with what the route does."""
    if spec.body is not None:
        media: dict[str, Any] = {"schema": _schema_ref(spec.body)}
        if spec.body_example is not None:
            media["example"] = spec.body_example
        operation["requestBody"] = {"required": True, "content": {"application/json": media}}
    operation["parameters"] = [_plain_parameter(p) for p in operation.get("parameters", [])]
    if not operation["parameters"]:
        del operation["parameters"]
    operation["operationId"] = spec.operation_id
    # FastAPI titles an operation after its function ("Get"); the docstring says what it does.
    operation["summary"] = operation.get("description", operation["summary"]).split("\n")[0]
    if operation.get("description") == operation["summary"]:
        del operation["description"]
    responses: dict[str, Any] = {str(s): _success(spec, s) for s in sorted(spec.answers)}
    statuses = sorted(set(COMMON_ERRORS + spec.errors) - set(spec.without) - set(spec.answers))
    for status in statuses:
        responses[str(status)] = {"$ref": f"#/components/responses/{ERRORS[status][2]}"}
    operation["responses"] = responses
    operation["security"] = [{BEARER: []}] if spec.protected else []


def build(app: FastAPI) -> dict[str, Any]:
    """The whole document for `app`."""
    document = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    table = operations()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            _describe(operation, table[(method, path)])
    describe(document["paths"])
    describe_archive(document["paths"])
    document["components"] = {
        "schemas": components(),
        "responses": _error_responses(),
        "securitySchemes": copy.deepcopy(document.get("components", {}).get("securitySchemes"))
        or {},
    }
    return document


def install(app: FastAPI) -> None:
    """Serve `build(app)` at the app's openapi_url (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
