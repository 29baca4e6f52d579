"""CPU one hostile body costs the API before and after bounding bodies (`make`-free: run it as
`.venv/bin/python -m bench.bombs`). In process, no server: "before" is what FastAPI (or the MCP
SDK) did with the body, "after" what `api.serving.bounded_json` does before either sees it. Bodies
over a route's byte bound, and keyless bodies, are now answered before a byte is parsed (0 ms).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from api.mcp.server import MESSAGE_BOUNDS
from api.read_schemas import BriefCreateRequest
from api.schemas import RetrieveRequest
from api.serving.bounded_bodies import BATCH, BRIEF
from api.serving.bounded_json import Bounds, Refused, parse

ROUNDS = 3


def cpu_ms(work: Callable[[], object]) -> float:
    """The least CPU time of a few rounds, in milliseconds."""
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best * 1000


def old_api(model: Any, data: bytes) -> Callable[[], object]:
    """FastAPI's path: json.loads, then the closed model builds one error per unknown key."""

    def run() -> object:
        try:
            return model.model_validate(json.loads(data))
        except (ValidationError, RecursionError, ValueError) as exc:
            return getattr(exc, "errors", lambda: None)()

    return run


def bounded(data: bytes, bounds: Bounds) -> Callable[[], object]:
    def run() -> object:
        try:
            return parse(data, bounds)
        except Refused as refused:
            return refused

    return run


def old_mcp(data: bytes) -> Callable[[], object]:
    import pydantic_core
    from mcp_types import JSONRPCMessage
    from pydantic import TypeAdapter

    adapter: TypeAdapter[Any] = TypeAdapter(JSONRPCMessage)

    def run() -> object:
        try:
            return adapter.validate_python(pydantic_core.from_json(data), by_name=False)
        except (ValidationError, ValueError) as exc:
            return exc

    return run


def main() -> None:
    ws = str(uuid.uuid4())
    retrieve = {
        "url": "https://example.org/",
        "kind": "url_text",
        "workspace_id": ws,
        "mutation_id": str(uuid.uuid4()),
    }
    key_bomb = json.dumps({**retrieve, **{f"k{i}": 1 for i in range(440_000)}}).encode()
    brief_bomb = json.dumps({"workspace_id": ws, "content": {f"k{i}": 1 for i in range(440_000)}})
    deep = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    huge = json.dumps({"workspace_id": ws, "content": {"title": "a" * 7_000_000}}).encode()
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "research_get_chunk", "arguments": {f"k{i}": 1 for i in range(300_000)}},
    }
    mcp_bomb = json.dumps(call).encode()
    rows = [
        (
            "retrieve key bomb (keyed)",
            len(key_bomb),
            old_api(RetrieveRequest, key_bomb),
            None,
        ),  # 413 from Content-Length: 16 KiB bound
        (
            "retrieve key bomb (keyless)",
            len(key_bomb),
            lambda: json.loads(key_bomb),
            None,
        ),  # 401 before the body is read
        (
            "briefs/create key bomb (keyed)",
            len(brief_bomb),
            old_api(BriefCreateRequest, brief_bomb.encode()),
            bounded(brief_bomb.encode(), BRIEF),
        ),
        (
            "batch deep nesting (keyed)",
            len(deep),
            old_api(RetrieveRequest, deep),
            bounded(deep, BATCH),
        ),
        (
            "briefs/create 7 MB string (keyed)",
            len(huge),
            old_api(BriefCreateRequest, huge),
            bounded(huge, BRIEF),
        ),
        (
            "MCP tools/call 300 000 keys (any)",
            len(mcp_bomb),
            old_mcp(mcp_bomb),
            None,
        ),  # 413 from Content-Length: 256 KiB bound
    ]
    small_mcp = json.dumps(
        {**call, "params": {"name": "x", "arguments": {f"k{i}": 1 for i in range(12_000)}}}
    ).encode()
    rows.append(
        (
            "MCP tools/call 12 000 keys, 200 KB (keyed)",
            len(small_mcp),
            old_mcp(small_mcp),
            bounded(small_mcp, MESSAGE_BOUNDS),
        )
    )
    print(f"{'body':44} {'bytes':>9} {'before ms':>10} {'after ms':>9}")
    for name, size, before, after in rows:
        later = 0.0 if after is None else cpu_ms(after)
        print(f"{name:44} {size:>9} {cpu_ms(before):>10.1f} {later:>9.1f}")


if __name__ == "__main__":
    main()
