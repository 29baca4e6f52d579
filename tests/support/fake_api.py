"""A stand-in for the retrieval API on loopback: a plain ASGI app served by uvicorn in a thread.

It implements `POST /research-api/evidence/retrieve` and `GET .../retrievals/{id}` with an
in-memory idempotency table keyed by (workspace_id, mutation_id), Bearer keys bound to
workspaces, and retrievals that settle after a few polls. Faults are scripted per URL: the n-th
POST of that URL plays the n-th action of `faults[url]` (`"503"`, `"drop"`, `"drop_after_create"`
or any status code), so a test can make the first attempts of some lines fail.
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

RETRIEVE = "/research-api/evidence/retrieve"
RETRIEVALS = "/research-api/evidence/retrievals/"
STAMP = "2099-01-15T09:00:00Z"
Scope = dict[str, Any]


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
    gets: int = 0
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
        if method == "POST" and path == RETRIEVE:
            return await self._retrieve(send, key, json.loads(body or b"{}"))
        if method == "GET" and path.startswith(RETRIEVALS):
            with self._lock:
                self.gets += 1
                record = self.by_id.get(path.removeprefix(RETRIEVALS))
                if record is not None:
                    record.polls += 1
            if record is None or not self._may_use(key, record.workspace_id):
                return await reply(send, 404, error("not_found", "no such retrieval"))
            return await reply(send, 200, {"retrieval": record.view(self.settle_after)})
        await reply(send, 404, error("not_found", "no such route"))

    async def _retrieve(self, send: Any, key: str, payload: dict[str, Any]) -> None:
        url, workspace, mid = (
            payload.get("url"),
            payload.get("workspace_id"),
            payload.get("mutation_id"),
        )
        if not isinstance(url, str) or payload.get("kind") not in (
            "url_text",
            "published_captions",
        ):
            return await reply(send, 422, error("invalid_input", "bad payload", "url"))
        if not self._may_use(key, str(workspace)):
            return await reply(send, 403, error("not_entitled", "workspace not allowed"))
        with self._lock:
            self.attempts[url] += 1
            script = self.faults.get(url, [])
            action = script[self.attempts[url] - 1] if self.attempts[url] <= len(script) else ""
        if action == "503":
            body = error("upstream_unavailable", "database down")
            return await reply(send, 503, body, {"retry-after": self.retry_after})
        if action == "drop":
            return await drop(send)
        if action.isdigit():
            return await reply(send, int(action), error("invalid_input", "scripted", "url"))
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
        if action == "drop_after_create":
            return await drop(send)
        if status == 409:
            return await reply(send, 409, error("invalid_input", "payload differs", "mutation_id"))
        await reply(send, status, {"retrieval": record.view(self.settle_after)})

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
