"""API keys' lifecycle: `evidence keys create|list|revoke|rotate`, expiry, last use, the
per-process cache, and a revocation reaching every API process and the MCP server.

The CLI runs as operators run it (the installed script) against the session's database.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
import typer
from typer._click import Command
from typer.core import TyperGroup, TyperOption
from typer.testing import CliRunner

from api import auth
from api.cli.key_admin import COLUMNS, document, parse_duration, parse_instant, table
from api.errors import ApiError
from tests.conftest import Env
from tests.mcp import read_support as rs
from tests.ops.test_cli import EVIDENCE, evidence
from tests.support.served import serve
from tests.support.slowdown import scaled
from worker.domain import clock
from worker.store import db, keys
from worker.store.models import ApiKey

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
#: The contract's promise: a revoked key answers 401 on every process within this many seconds.
REVOCATION_SECONDS = 5.0
#: An option line naming only flags (`--x`, `-x, --x`, `--x / --no-x`), then its help or nothing.
_BARE_FLAG = re.compile(r"^\s*(?:--?[\w-]+(?:, | / )?)+(?:\s{2,}\S|\s*$)")
_CREATED = re.compile(r"key ([0-9a-f-]{36}) \((evk_[A-Za-z0-9_-]+)…\)")


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    """Each test starts and ends without keys cached in this process."""
    auth.key_cache.clear()
    yield
    auth.key_cache.clear()


def _row(**fields: Any) -> ApiKey:
    base: dict[str, Any] = {
        "key_hash": "0" * 64,
        "prefix": "evk_abcdefgh",
        "workspaces": ["11111111-1111-4111-8111-111111111111"],
        "scopes": ["agent:research"],
        "created_at": T0,
    }
    return ApiKey(**{**base, **fields})


def _create(tmp_path: Path, *args: str) -> tuple[uuid.UUID, str, str]:
    """`evidence keys create ARGS`: (id, prefix, key) as it reported them."""
    done = evidence("keys", "create", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    key = done.stdout.splitlines()[-1]
    assert done.stdout == f"{key}\n", "the key is alone on stdout"
    found = _CREATED.search(done.stderr)
    assert found is not None and "shown only once" in done.stderr, done.stderr
    assert key not in done.stderr
    assert key.startswith(found.group(2))
    return uuid.UUID(found.group(1)), found.group(2), key


def _listed(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """`evidence keys list --json`, by id."""
    done = evidence("keys", "list", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return {d["id"]: d for d in map(json.loads, done.stdout.splitlines())}


def _auth(key: str) -> auth.Principal:
    """Authenticate as a request does (nothing cached)."""
    auth.key_cache.clear()
    with db.session_scope(readonly=True) as session:
        return auth.authenticate(session, f"Bearer {key}")


def _refused(key: str) -> ApiError:
    with pytest.raises(ApiError) as caught:
        _auth(key)
    assert caught.value.status == 401 and caught.value.code == "not_entitled"
    return caught.value


class TestDurationsAndInstants:
    @pytest.mark.parametrize(
        ("text", "seconds"),
        [("45s", 45), ("30m", 1800), ("12h", 43200), ("90d", 90 * 86400), ("2w", 14 * 86400),
         ("1h30m", 5400), (" 1D ", 86400), ("0h5m", 300)],
    )  # fmt: skip
    def test_durations(self, text: str, seconds: int) -> None:
        assert parse_duration(text) == timedelta(seconds=seconds)

    @pytest.mark.parametrize(
        "text", ["", "5", "m", "5x", "-5m", "1.5h", "5 m", "0s", "0h0m", "h5", "36600000d"]
    )
    def test_bad_durations(self, text: str) -> None:
        with pytest.raises(ValueError):
            parse_duration(text)

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("2026-02-01", datetime(2026, 2, 1, tzinfo=UTC)),
            ("2026-02-01T10:00Z", datetime(2026, 2, 1, 10, tzinfo=UTC)),
            ("2026-02-01T12:00+02:00", datetime(2026, 2, 1, 10, tzinfo=UTC)),
            ("2026-01-01T12:00:01", T0 + timedelta(seconds=1)),
        ],
    )
    def test_instants_are_utc(self, text: str, expected: datetime) -> None:
        assert parse_instant(text, T0) == expected

    @pytest.mark.parametrize("text", ["tomorrow", "2026-13-01", "2026-01-01T12:00Z", "2025-06-01"])
    def test_bad_or_past_instants(self, text: str) -> None:
        with pytest.raises(ValueError):
            parse_instant(text, T0)


class TestKeyState:
    @pytest.mark.parametrize(
        ("revoked", "expires", "state"),
        [
            (None, None, "active"),
            (T0 + timedelta(seconds=1), None, "active"),  # a rotation's grace period
            (T0, None, "revoked"),
            (T0 - timedelta(days=1), None, "revoked"),
            (None, T0 + timedelta(seconds=1), "active"),
            (None, T0, "expired"),
            (T0 - timedelta(days=1), T0 - timedelta(days=2), "revoked"),
            (T0 + timedelta(days=1), T0 - timedelta(days=2), "expired"),
            (T0.replace(tzinfo=None), None, "revoked"),  # SQLite hands back naive UTC
        ],
    )
    def test_state(self, revoked: datetime | None, expires: datetime | None, state: str) -> None:
        assert auth.key_state(revoked, expires, T0) == state

    @pytest.mark.parametrize(
        ("revoked", "expires", "seconds"),
        [
            (None, None, auth.KEY_CACHE_SECONDS),
            (None, T0 + timedelta(days=1), auth.KEY_CACHE_SECONDS),
            (T0 + timedelta(seconds=0.5), None, 0.5),
            (T0 + timedelta(days=1), T0 + timedelta(seconds=0.25), 0.25),
        ],
    )
    def test_trust_never_outlives_the_key(
        self, revoked: datetime | None, expires: datetime | None, seconds: float
    ) -> None:
        assert auth.trust_seconds(revoked, expires, T0) == seconds

    def test_the_cache_keeps_the_promise(self) -> None:
        """What a process may answer from its cache after a revocation is within 5 s."""
        assert 0 < auth.KEY_CACHE_SECONDS <= REVOCATION_SECONDS

    @pytest.mark.parametrize(
        ("last", "stale"),
        [(None, True), (T0, False), (T0 - timedelta(seconds=59), False),
         (T0 - timedelta(seconds=60), True), (T0 - timedelta(days=3), True)],
    )  # fmt: skip
    def test_last_use_is_written_once_a_minute(self, last: datetime | None, stale: bool) -> None:
        assert auth.use_is_stale(last, T0) is stale


class TestListing:
    def test_a_document_holds_no_secret_and_every_column(self) -> None:
        row = _row(last_used_at=T0, expires_at=T0 + timedelta(days=1))
        doc = document(row, T0)
        assert set(doc) == {field for _, field in COLUMNS}
        assert doc["prefix"] == "evk_abcdefgh" and doc["state"] == "active"
        assert doc["last_used_at"] == "2026-01-01T12:00:00.000Z"
        assert doc["revoked_at"] is None
        assert "0" * 64 not in json.dumps(doc), "not even the hash is listed"

    def test_table_aligns_and_marks_missing_times(self) -> None:
        docs = [document(_row(), T0), document(_row(revoked_at=T0, scopes=["a", "b"]), T0)]
        header, first, second = table(docs)
        assert header.split() == ["id", "prefix", "state", "workspaces", "scopes", "created",
                                  "last", "used", "expires", "revoked"]  # fmt: skip
        assert first.split()[2] == "active" and first.split()[-3:] == ["-", "-", "-"]
        assert second.split()[2] == "revoked" and second.split()[4] == "a,b"
        assert header.index("state") == first.index("active") == second.index("revoked")


class TestCache:
    """Each process trusts a verified key for at most KEY_CACHE_SECONDS."""

    def test_a_revocation_is_seen_once_the_entry_lapses(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        key_id, _, key = _create(tmp_path, "--workspace", str(uuid.uuid4()))
        moment = [1000.0]
        monkeypatch.setattr(auth, "key_cache", auth.KeyCache(lambda: moment[0]))
        with db.session_scope(readonly=True) as session:
            auth.authenticate(session, f"Bearer {key}")
        db.with_transient_retry(lambda s: keys.revoke_key(s, key_id, clock.now()))
        header = f"Bearer {key}"
        assert auth.cached_principal(header) is not None, "cached: no database read"
        moment[0] += auth.KEY_CACHE_SECONDS
        assert auth.cached_principal(header) is None
        with pytest.raises(ApiError) as caught, db.session_scope(readonly=True) as session:
            auth.authenticate(session, header)
        assert caught.value.status == 401 and caught.value.message == "the API key was revoked"

    def test_an_expiring_key_is_cached_only_until_it_expires(self) -> None:
        moment = [1000.0]
        cache = auth.KeyCache(lambda: moment[0])
        principal = auth.Principal(uuid.uuid4(), frozenset(), frozenset())
        cache.put("h", principal, 0.5)
        cache.put("gone", principal, 0)
        cache.put("long", principal, 3600)
        assert cache.get("h") is principal and cache.get("gone") is None
        moment[0] += 0.5
        assert cache.get("h") is None and cache.get("long") is principal
        moment[0] += auth.KEY_CACHE_SECONDS
        assert cache.get("long") is None, "never longer than KEY_CACHE_SECONDS"


class TestCommands:
    def test_create_list_revoke(self, tmp_path: Path) -> None:
        """A created key is listed by id and prefix (never in full), works, and after
        `revoke` answers 401; revoking twice is harmless."""
        ws = [uuid.uuid4(), uuid.uuid4()]
        key_id, prefix, key = _create(
            tmp_path, "--workspace", str(ws[0]), "--workspace", str(ws[1]), "--scope", "x:y"
        )
        assert _auth(key).workspaces == set(ws)
        shown = _listed(tmp_path)[str(key_id)]
        assert shown["prefix"] == prefix and shown["state"] == "active"
        assert shown["workspaces"] == [str(w) for w in ws] and shown["scopes"] == ["x:y"]
        assert shown["last_used_at"] is not None and shown["revoked_at"] is None
        table_out = evidence("keys", "list", cwd=tmp_path)
        assert table_out.returncode == 0 and str(key_id) in table_out.stdout
        assert table_out.stdout.splitlines()[0].startswith("id ")
        for listing in (table_out.stdout, json.dumps(_listed(tmp_path))):
            assert key not in listing and key[len(prefix) :] not in listing

        for _ in range(2):
            done = evidence("keys", "revoke", str(key_id), cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            assert f"revoked key {key_id} ({prefix}…)" in done.stderr and done.stdout == ""
        assert _refused(key).message == "the API key was revoked"
        assert _listed(tmp_path)[str(key_id)]["state"] == "revoked"

    def test_last_use_is_recorded_at_most_once_a_minute(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        key_id, _, key = _create(tmp_path, "--workspace", str(uuid.uuid4()))
        assert _listed(tmp_path)[str(key_id)]["last_used_at"] is None
        start = clock.now()
        monkeypatch.setattr(clock, "now", lambda: start)
        _auth(key)
        monkeypatch.setattr(clock, "now", lambda: start + timedelta(seconds=59))
        _auth(key)
        with db.session_scope(readonly=True) as session:
            row = keys.get_key(session, key_id)
            assert row is not None and row.last_used_at is not None
            assert clock.as_utc(row.last_used_at) == start
        monkeypatch.setattr(clock, "now", lambda: start + timedelta(seconds=61))
        _auth(key)
        with db.session_scope(readonly=True) as session:
            row = keys.get_key(session, key_id)
            assert row is not None and row.last_used_at is not None
            assert clock.as_utc(row.last_used_at) == start + timedelta(seconds=61)

    def test_rotate_replaces_and_revokes(self, tmp_path: Path) -> None:
        """`rotate` prints a new key with the same grants and revokes the old one at once."""
        ws = uuid.uuid4()
        old_id, _, old = _create(tmp_path, "--workspace", str(ws), "--scope", "a", "--scope", "b")
        done = evidence("keys", "rotate", str(old_id), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        new = done.stdout.splitlines()[-1]
        assert done.stdout == f"{new}\n" and new != old
        assert f"replaces {old_id} (revoked now)" in done.stderr
        principal = _auth(new)
        assert principal.workspaces == {ws} and principal.scopes == {"a", "b"}
        _refused(old)
        listed = _listed(tmp_path)
        assert listed[str(old_id)]["state"] == "revoked"
        assert listed[str(principal.key_id)]["state"] == "active"

    def test_rotate_with_grace_keeps_the_old_key_working(self, tmp_path: Path) -> None:
        old_id, _, old = _create(tmp_path, "--workspace", str(uuid.uuid4()), "--expires-in", "1d")
        done = evidence("keys", "rotate", str(old_id), "--grace", "10m", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        new = done.stdout.splitlines()[-1]
        assert _auth(old).key_id == old_id, "still works during the grace period"
        listed = _listed(tmp_path)
        old_doc, new_doc = listed[str(old_id)], listed[str(_auth(new).key_id)]
        assert old_doc["state"] == "active" and old_doc["revoked_at"] is not None
        left = datetime.fromisoformat(old_doc["revoked_at"]) - clock.now()
        assert timedelta(minutes=9) < left <= timedelta(minutes=10)
        assert new_doc["expires_at"] == old_doc["expires_at"], "the replacement keeps the expiry"
        done = evidence("keys", "revoke", str(old_id), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert _refused(old).message == "the API key was revoked", "revoke cuts the grace short"
        assert _auth(new).key_id == uuid.UUID(new_doc["id"])

    def test_expired_key_answers_401(self, tmp_path: Path) -> None:
        """A key past its expiry is refused; `--expires-at` and `--expires-in` set it."""
        key_id, _, key = _create(tmp_path, "--workspace", str(uuid.uuid4()), "--expires-in", "1h")
        assert _auth(key).key_id == key_id
        later = _create(tmp_path, "--workspace", str(uuid.uuid4()), "--expires-at", "2999-01-01")
        assert _listed(tmp_path)[str(later[0])]["expires_at"] == "2999-01-01T00:00:00.000Z"
        past = clock.now() - timedelta(seconds=1)
        db.with_transient_retry(
            lambda s: s.execute(
                keys.API_KEY.update().where(keys.API_KEY.c.id == key_id).values(expires_at=past)
            )
        )
        assert _refused(key).message == "the API key has expired"
        assert _listed(tmp_path)[str(key_id)]["state"] == "expired"

    @pytest.mark.parametrize(
        ("args", "says"),
        [
            (("create", "--workspace", "{ws}", "--expires-in", "soon"), "'--expires-in'"),
            (("create", "--workspace", "{ws}", "--expires-at", "2001-01-01"), "not in the future"),
            (("create", "--workspace", "{ws}", "--expires-in", "1d", "--expires-at",
              "2999-01-01"), "not both"),
            (("rotate", "{ws}", "--grace", "0s"), "'--grace'"),
            (("revoke", "not-a-uuid"), "Invalid value for 'KEY_ID'"),
        ],
        ids=["bad-duration", "past-instant", "both-expiries", "zero-grace", "bad-id"],
    )  # fmt: skip
    def test_usage_errors_exit_2(self, args: tuple[str, ...], says: str, tmp_path: Path) -> None:
        ws = str(uuid.uuid4())
        done = evidence("keys", *(a.format(ws=ws) for a in args), cwd=tmp_path)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert says in done.stderr and "Traceback" not in done.stderr, done.stderr

    @pytest.mark.parametrize("command", ["revoke", "rotate"])
    def test_unknown_id_exits_1(self, command: str, tmp_path: Path) -> None:
        missing = uuid.uuid4()
        done = evidence("keys", command, str(missing), cwd=tmp_path)
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr == f"error: no key has the id {missing}\n"


def _commands(
    group: Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Command]]:
    yield path, group
    if isinstance(group, TyperGroup):
        for name, command in group.commands.items():
            yield from _commands(command, (*path, name))


class TestHelp:
    """Flags read as flags: `--wait`, never `--wait <bool>` (which would be an error)."""

    def test_every_flag_is_shown_bare(self) -> None:
        from api.cli.main import app

        runner = CliRunner()
        seen: set[str] = set()
        for path, command in _commands(typer.main.get_command(app)):
            done = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
            assert done.exit_code == 0, (path, done.output)
            assert "<bool>" not in done.output, (path, done.output)
            flags = [p.opts for p in command.params if isinstance(p, TyperOption) and p.is_flag]
            for opts in [["--help"], *flags]:
                seen.update(opts)
                line = next(ln for ln in done.output.splitlines() if ln.strip().startswith(opts[0]))
                assert _BARE_FLAG.match(line), (path, line)
        assert {"--help", "--wait", "--clear", "--json"} <= seen

    def test_installed_script_shows_wait_bare(self, tmp_path: Path) -> None:
        done = subprocess.run(
            [str(EVIDENCE), "enqueue", "--help"],
            cwd=tmp_path,
            env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        wait = next(ln for ln in done.stdout.splitlines() if ln.strip().startswith("--wait"))
        assert re.match(r"^\s*--wait\s{2,}Wait \(long-poll\)", wait), wait
        assert re.search(r"^\s*--concurrency <int range>", done.stdout, re.MULTILINE)


def _pid_of_connection(response: httpx.Response, server_port: int, pids: set[int]) -> int:
    """The server process that answered on this (kept-alive) connection: the one holding the
    socket whose peer is the client's port."""
    client_port = response.extensions["network_stream"].get_extra_info("client_addr")[1]
    wanted = f"0100007F:{server_port:04X} 0100007F:{client_port:04X}"
    # The kernel writes /proc/net/tcp a page at a time while sockets come and go, so one read may
    # list a row twice or miss it: rows are a set, and a read that missed it is taken again.
    for _ in range(20):
        inodes = {
            line.split()[9]
            for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
            if " ".join(line.split()[1:3]) == wanted and line.split()[3] == "01"  # established
        }
        if inodes:
            break
        time.sleep(0.05)
    assert len(inodes) == 1, (wanted, inodes)
    target = f"socket:[{inodes.pop()}]"
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if fd.readlink().as_posix() == target:
                    return pid
            except OSError:
                continue
    raise AssertionError(f"no server process holds {target}")


def _descendants(pid: int) -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    children = {int(p) for p in out.stdout.split()}
    return children.union(*(_descendants(c) for c in children))


async def _mcp_refusal(url: str, key: str) -> str | None:
    """Call a read tool over MCP: None if it answered, else the error's code."""
    async with rs.http_connector(url)(key, "plain", "auto") as client:
        result = await client.call_tool(rs.GET_CHUNK, {"chunk_id": "ch_nope"})
    assert isinstance(result, types.CallToolResult)
    if not result.is_error:
        return None
    assert result.structured_content is not None, result.content
    return str(result.structured_content["error"]["code"])


def test_a_revoked_key_is_refused_by_every_process(env: Env, tmp_path: Path) -> None:
    """`evidence api --workers 2` and `evidence mcp --transport http` each answer with a key
    they have just verified (and cached); after `evidence keys revoke`, every API process
    answers 401 `not_entitled`, and the MCP server `not_entitled`, within the promised 5 s."""
    key_id, _, key = _create(tmp_path, "--workspace", str(uuid.uuid4()))
    with ExitStack() as stack:
        api_port, api_proc = stack.enter_context(
            serve(["api", "--host", "127.0.0.1", "--workers", "2"], env.tmp / "keys-api.log")
        )
        mcp_port, _ = stack.enter_context(
            serve(["mcp", "--transport", "http", "--host", "127.0.0.1"], env.tmp / "keys-mcp.log")
        )
        mcp_url = f"http://127.0.0.1:{mcp_port}/mcp"
        url = f"http://127.0.0.1:{api_port}/research-api/evidence/retrievals/{uuid.uuid4()}"
        headers = {"Authorization": f"Bearer {key}"}

        # One kept-alive connection per worker process, each having verified the key.
        connections: dict[int, httpx.Client] = {}
        deadline = time.monotonic() + scaled(60)
        while len(connections) < 2:
            assert time.monotonic() < deadline, f"only {set(connections)} answered"
            client = stack.enter_context(httpx.Client(headers=headers, timeout=30))
            answer = client.get(url)
            assert answer.status_code == 404, answer.text  # the key works: no such retrieval
            pid = _pid_of_connection(answer, api_port, _descendants(api_proc.pid))
            connections.setdefault(pid, client)
        assert anyio.run(_mcp_refusal, mcp_url, key) is None

        revoke = stack.enter_context(
            subprocess.Popen(
                [str(EVIDENCE), "keys", "revoke", str(key_id)],
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        refused: set[int | str] = set()
        revoked_at: float | None = None
        while refused != {*connections, "mcp"}:
            for pid, client in connections.items():  # polled meanwhile: kept alive
                answer = client.get(url)
                assert _pid_of_connection(answer, api_port, {pid}) == pid
                if answer.status_code == 401:
                    assert answer.json()["error"]["code"] == "not_entitled", answer.text
                    refused.add(pid)
                else:
                    assert answer.status_code == 404, answer.text
            if "mcp" not in refused:
                code = anyio.run(_mcp_refusal, mcp_url, key)
                assert code in (None, "not_entitled"), code
                if code is not None:
                    refused.add("mcp")
            if revoked_at is None and revoke.poll() is not None:
                assert revoke.returncode == 0, revoke.stderr.read() if revoke.stderr else ""
                revoked_at = time.monotonic()
            if revoked_at is not None:
                waited = time.monotonic() - revoked_at
                assert waited < scaled(REVOCATION_SECONDS), (
                    f"still accepted after {waited:.1f} s by {({*connections, 'mcp'}) - refused}"
                )
            time.sleep(0.1)
        assert revoked_at is not None or revoke.wait(30) == 0
