"""A stand-in for the retrieval API on loopback: a plain ASGI app served by uvicorn in a thread.

It implements the batch routes `evidence enqueue` uses, `POST /research-api/evidence/retrieve/
batch` and `POST .../retrievals/batch-get`, with an in-memory idempotency table keyed by
(workspace_id, mutation_id), Bearer keys bound to workspaces, and retrievals that settle after a
few reads. Faults are scripted per URL: the n-th batch carrying that URL plays the n-th action of
`faults[url]`. `"503"`, `"drop"` and `"drop_after_create"` act on the whole request (as a failing
server or network would); a status code (`"422"`, `"429"`, …) is that item's result.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import uvicorn

BATCH = "/research-api/evidence/retrieve/batch"
BATCH_GET = "/research-api/evidence/retrievals/batch-get"
STAMP = "2099-01-15T09:00:00Z"
Scope = dict[str, Any]
KINDS = ("url_text", "published_captions")


@dataclass
class Record:
    """One retrieval as the fake stores it."""

    id: str
    workspace_id: str
    mutation_id: str
    url: str
    kind: str
    language: str | None
    polls: int = 0

    def view(self, settle_after: int) -> dict[str, Any]:
        """Render the retrieval as the API would, settled once polled `settle_after` times."""
        settled = self.polls >= settle_after
        retrieval = {"id": self.id, "workspace_id": self.workspace_id, "kind": self.kind}
        retrieval |= {"mutation_id": self.mutation_id, "created_at": STAMP, "evidence": None}
        retrieval |= {"state": "completed" if settled else "pending", "valid_until": STAMP}
        retrieval |= {"settled_at": STAMP if settled else None, "result": None}
        if settled:
            status, reason = (
                ("unavailable", "not_found") if "missing" in self.url else ("ready", None)
            )
            retrieval["result"] = {"kind": self.kind, "status": status, "reason": reason}
        return retrieval


@dataclass
class FakeApi:
    """The fake API's state and controls; use as a context manager to serve it."""

    keys: dict[str, set[str]] = field(default_factory=lambda: {"good-key": {"*"}})
    settle_after: int = 2
    faults: dict[str, list[str]] = field(default_factory=dict)
    retry_after: str = "0"
    delay_seconds: float = 0.0
    table: dict[tuple[str, str], Record] = field(default_factory=dict)
    by_id: dict[str, Record] = field(default_factory=dict)
    created: Counter[tuple[str, str]] = field(default_factory=Counter)
    attempts: Counter[str] = field(default_factory=Counter)
    #: Retrievals read (one per id of each batch-get), batch-get requests (their times and
    #: sizes), their Prefer headers.
    gets: int = 0
    reads: list[float] = field(default_factory=list)
    read_sizes: list[int] = field(default_factory=list)
    prefers: list[str] = field(default_factory=list)
    #: The Cache-Control header of each batch submit ("" when absent).
    cache_controls: list[str] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None

    @property
    def url(self) -> str:
        """Base URL of the running server."""
        assert self._server is not None, "server not started"
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def seed(self, workspace_id: str, mutation_id: str, url: str, kind: str = "url_text") -> None:
        """Record a retrieval as if an earlier client had created it."""
        record = Record(str(uuid.uuid4()), workspace_id, mutation_id, url, kind, None)
        self.table[(workspace_id, mutation_id)] = record
        self.by_id[record.id] = record

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        """Serve one ASGI request."""
        assert scope["type"] == "http"
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_seconds:
                await asyncio.sleep(self.delay_seconds)
            await self._dispatch(scope, receive, send)
        finally:
            with self._lock:
                self.in_flight -= 1

    async def _dispatch(self, scope: Scope, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        key = headers.get("authorization", "").removeprefix("Bearer ")
        if key not in self.keys:
            return await reply(send, 401, error("not_entitled", "unknown key"))
        path, method = scope["path"], scope["method"]
        if method == "POST" and path == BATCH:
            self.cache_controls.append(headers.get("cache-control", ""))
            return await self._batch(send, key, json.loads(body or b"{}"))
        if method == "POST" and path == BATCH_GET:
            return await self._batch_get(send, key, json.loads(body or b"{}"), headers)
        await reply(send, 404, error("not_found", "no such route"))

    async def _batch_get(
        self, send: Any, key: str, payload: dict[str, Any], headers: dict[str, str]
    ) -> None:
        with self._lock:
            self.reads.append(time.monotonic())
            self.read_sizes.append(len(payload["ids"]))
            self.prefers.append(headers.get("prefer", ""))
            found = []
            for retrieval_id in payload["ids"]:
                self.gets += 1
                record = self.by_id.get(retrieval_id)
                if record is None or not self._may_use(key, record.workspace_id):
                    found.append(None)
                    continue
                record.polls += 1
                found.append(record.view(self.settle_after))
        await reply(send, 200, {"retrievals": found})

    async def _batch(self, send: Any, key: str, payload: dict[str, Any]) -> None:
        items = payload["items"]
        self.batches.append(len(items))
        with self._lock:
            actions = []
            for item in items:
                url = item.get("url")
                self.attempts[url] += 1
                script = self.faults.get(url, [])
                n = self.attempts[url]
                actions.append(script[n - 1] if n <= len(script) else "")
        if "503" in actions:
            body = error("upstream_unavailable", "database down")
            return await reply(send, 503, body, {"retry-after": self.retry_after})
        if "drop" in actions:
            return await drop(send)
        results = [self._item(key, i, a) for i, a in zip(items, actions, strict=True)]
        if "drop_after_create" in actions:
            return await drop(send)
        await reply(send, 200, {"results": results})

    def _item(self, key: str, payload: dict[str, Any], action: str) -> dict[str, Any]:
        url, workspace, mid = (
            payload.get("url"),
            payload.get("workspace_id"),
            payload.get("mutation_id"),
        )
        if not isinstance(url, str) or payload.get("kind") not in KINDS:
            return {"status": 400, **error("invalid_input", "bad payload", "url")}
        if not self._may_use(key, str(workspace)):
            return {"status": 403, **error("not_entitled", "workspace not allowed")}
        if action == "429":
            refused = error("rate_limited", "over quota")
            refused["error"]["details"] = {"retry_after_seconds": float(self.retry_after)}
            return {"status": 429, **refused}
        if action.isdigit():
            return {"status": int(action), **error("invalid_input", "scripted", "url")}
        args = (url, payload["kind"], payload.get("language"))
        with self._lock:
            record = self.table.get((str(workspace), str(mid)))
            if record is None:
                record = Record(str(uuid.uuid4()), str(workspace), str(mid), *args)
                self.table[(record.workspace_id, record.mutation_id)] = record
                self.by_id[record.id] = record
                self.created[(record.workspace_id, record.mutation_id)] += 1
                status = 202
            else:
                status = 200 if (record.url, record.kind, record.language) == args else 409
        if status == 409:
            return {"status": 409, **error("invalid_input", "payload differs", "mutation_id")}
        return {"status": status, "retrieval": record.view(self.settle_after)}

    def _may_use(self, key: str, workspace: str) -> bool:
        allowed = self.keys.get(key, set())
        return "*" in allowed or workspace in allowed

    def __enter__(self) -> FakeApi:
        config = uvicorn.Config(
            self, host="127.0.0.1", port=0, log_level="critical", lifespan="off", access_log=False
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "fake API did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.should_exit = True
        self._thread.join(timeout=10)


def error(code: str, message: str, field_name: str | None = None) -> dict[str, Any]:
    """Build the contract's error envelope."""
    body: dict[str, Any] = {"code": code, "message": message}
    if field_name is not None:
        body["field"] = field_name
    return {"error": body}


async def reply(send: Any, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    """Send a complete JSON response."""
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


async def drop(send: Any) -> None:
    """Start a response, then fail: uvicorn closes the connection mid-body."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"1000")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b'{"retr', "more_body": True})
    raise ConnectionAbortedError("scripted connection drop")
