"""The MCP tools: a small registry of contract-described tools, and the tools themselves.

A tool is an async function `(principal, arguments) -> payload` registered with `@tool`, named
after its contract files in `worker/contract/` (`<contract>.input.json`, `.output.json`,
`.annotations.json`), which are advertised byte for byte of meaning and enforced on every call.
A tool with no contract file for a part supplies that document with `provide` (contract files
always win). The read side's tools live in `api.mcp.read_tools`, on this same registry.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

import anyio
import anyio.to_thread
from jsonschema import ValidationError
from jsonschema.protocols import Validator
from pydantic import BaseModel
from pydantic import ValidationError as ModelValidationError

from api.auth import Principal
from api.errors import ApiError, invalid_input, validation_error
from api.schema_check import input_validator
from api.schemas import RetrieveRequest
from api.services import retrievals, waiters
from api.services.evidence_payload import RetrievalPayload
from api.serving.bounded_json import Bounds, Refused, check
from worker import contract
from worker.domain.states import OPEN_STATES
from worker.platform.settings import get_settings
from worker.store import db

#: A tool answers its contract's output document (a TypedDict where one is declared).
ToolFn = Callable[[Principal, Any], Awaitable[Mapping[str, Any]]]


@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool: its name, its contract files, and the function that runs it."""

    name: str
    contract: str
    title: str
    description: str
    run: ToolFn
    #: The model the HTTP API parses the same input with (so errors name fields identically).
    model: type[BaseModel] | None = None

    @property
    def input_schema(self) -> dict[str, Any]:
        return contract_file(f"{self.contract}.input.json")

    @property
    def output_schema(self) -> dict[str, Any]:
        return contract_file(f"{self.contract}.output.json")

    @property
    def annotations(self) -> dict[str, Any]:
        return contract_file(f"{self.contract}.annotations.json")


#: Every tool the server offers, by name, in registration order.
REGISTRY: dict[str, ToolSpec] = {}


def tool(
    name: str, *, contract: str, title: str, description: str, model: type[BaseModel] | None = None
) -> Callable[[ToolFn], ToolFn]:
    """Register the decorated function as the MCP tool `name`."""

    def register(fn: ToolFn) -> ToolFn:
        REGISTRY[name] = ToolSpec(name, contract, title, description, fn, model)
        return fn

    return register


#: Schema documents of tools that have no such contract file, by the file name they stand for.
PROVIDED: dict[str, str] = {}


def provide(filename: str, document: dict[str, Any]) -> None:
    """Supply `filename`'s document for a tool without that contract file (files still win)."""
    PROVIDED[filename] = json.dumps(document)


def contract_file(filename: str) -> dict[str, Any]:
    """A fresh copy of one contract file's JSON (or of the document provided in its place)."""
    text = contract.text(filename)
    return cast("dict[str, Any]", json.loads(text if text is not None else PROVIDED[filename]))


@cache
def _input_validator(contract: str) -> Validator:
    return input_validator(contract_file(f"{contract}.input.json"))


def _field_of(error: ValidationError) -> str | None:
    """The argument a JSON Schema error is about (the missing or unknown one when that's it)."""
    if (
        error.validator == "required"
        and isinstance(error.instance, dict)
        and isinstance(error.validator_value, list)
    ):
        missing = [name for name in error.validator_value if name not in error.instance]
        return str(missing[0]) if missing else None
    if (
        error.validator == "additionalProperties"
        and isinstance(error.instance, dict)
        and isinstance(error.schema, Mapping)
    ):
        known = error.schema.get("properties", {})
        extra = [name for name in error.instance if name not in known]
        return str(extra[0]) if extra else None
    return str(error.path[0]) if error.path else None


#: Tool arguments (over stdio too): text the database refuses is refused naming its argument.
ARGUMENT_BOUNDS = Bounds(max_bytes=0, max_values=4096, max_depth=16, max_string_chars=64 * 1024)


def parse_arguments(spec: ToolSpec, arguments: dict[str, Any]) -> Any:
    """Check `arguments` as the HTTP API does, then against the advertised input schema."""
    try:
        check(arguments, ARGUMENT_BOUNDS)
    except Refused as exc:
        raise invalid_input(exc.message, exc.field) from None
    parsed: Any = arguments
    if spec.model is not None:
        try:
            parsed = spec.model.model_validate(arguments)
        except ModelValidationError as exc:
            raise validation_error(exc.errors()) from None
    error = next(iter(_input_validator(spec.contract).iter_errors(arguments)), None)
    if error is not None:
        field = _field_of(error)
        raise invalid_input(f"{field}: {error.message}" if field else error.message, field)
    return parsed


def _read_retrieval(principal: Principal, retrieval_id: uuid.UUID) -> RetrievalPayload:
    with db.session_scope(readonly=True) as session:
        return retrievals.read_retrieval(session, principal, retrieval_id)


async def _settle(principal: Principal, payload: RetrievalPayload) -> RetrievalPayload:
    """Wait up to the configured time for the retrieval to settle; answer it as it stands.

    Woken by the settle notification (`api.services.waiters`), like `GET …/retrievals/{id}`
    with `Prefer: wait=N`: no re-reading on a timer, no thread held while waiting.
    """
    seconds = get_settings().mcp_wait_seconds
    if payload["retrieval"]["state"] not in OPEN_STATES or seconds <= 0:
        return payload  # no wait: the answer is the retrieval as the call recorded it
    retrieval_id = uuid.UUID(payload["retrieval"]["id"])

    def read() -> RetrievalPayload:
        try:
            return _read_retrieval(principal, retrieval_id)
        except ApiError as exc:
            if exc.code != "not_found":
                raise
            return payload  # cannot happen for a retrieval this key just recorded

    return await waiters.wait_until(
        read,
        [str(retrieval_id)],
        lambda answer: answer["retrieval"]["state"] not in OPEN_STATES,
        seconds,
    )


@tool(
    "sosoapi_research_evidence_retrieve",
    contract="evidence_retrieve",
    title="Read a public research source",
    description=(
        "Retrieve bounded public HTTPS text or published captions; reuse mutation_id, inspect "
        "coverage and untrusted text. Requires agent:research."
    ),
    model=RetrieveRequest,
)
async def evidence_retrieve(principal: Principal, request: RetrieveRequest) -> RetrievalPayload:
    """Record the retrieval as `POST /research-api/evidence/retrieve` does; wait a bounded time."""
    try:
        submitted = await anyio.to_thread.run_sync(retrievals.submit_retrieval, principal, request)
    except ApiError as exc:
        raise for_mcp(exc) from None
    return await _settle(principal, submitted.payload)


def for_mcp(error: ApiError) -> ApiError:
    """A quota refusal in the MCP contract's terms: it has no `rate_limited` code, so it is
    `upstream_unavailable` (try again later) with the reason and when, like the read tools'."""
    if error.code != "rate_limited":
        return error
    details = {"reason": "rate_limited", **(error.details or {})}
    return ApiError(503, "upstream_unavailable", error.message, details=details)
