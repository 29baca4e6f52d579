"""`evidence enqueue` as a subprocess against the real service: API process, worker, beat."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.ops.conftest import LiveApi, tmp_file
from tests.support.factories import cancel_open
from tests.support.schemas import validate_retrieval_payload
from tests.support.services import ROOT, wait_for
from tests.support.tls_site import TLSSite
from worker.store import db
from worker.store.models import Retrieval

pytestmark = pytest.mark.usefixtures("services")
ROW = re.compile(r"^\s*[│|]\s*(?P<label>[^│|]+?)\s*[│|]\s*(?P<n>\d+)\s*[│|]\s*$")


def command(live_api: LiveApi, workspace: uuid.UUID, path: Path, *extra: str) -> list[str]:
    """The enqueue command line (the key comes from the environment, as operators pass it)."""
    args = ["enqueue", str(path), "--workspace", str(workspace), "--kind", "url_text"]
    return [sys.executable, "-m", "api.cli", *args, "--api", live_api.url, *extra]


def run(args: list[str], key: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the command to completion."""
    env = {**os.environ, "EVIDENCE_API_KEY": key}
    return subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def summary(stderr: str) -> dict[str, int]:
    """The closing summary table as {row label: count}."""
    return {m["label"]: int(m["n"]) for m in map(ROW.match, stderr.splitlines()) if m}


def rows(workspace: uuid.UUID) -> list[tuple[str, uuid.UUID]]:
    """(url, mutation_id) of every retrieval recorded for the workspace."""
    T = Retrieval.__table__.c  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        query = sa.select(T.url, T.mutation_id).where(T.workspace_id == workspace)
        return [(row.url, row.mutation_id) for row in session.execute(query)]


class TestWaitAndOut:
    """A small batch with --wait --out: results, bad lines and the summary."""

    def test_wait_writes_settled_results(
        self,
        live_api: LiveApi,
        tenant: tuple[uuid.UUID, str],
        pages: list[str],
        site: TLSSite,
        tmp_path: Path,
    ) -> None:
        """Valid lines settle and are written; bad lines are reported by number; exit code 1."""
        workspace, key = tenant
        missing = site.url(f"/ops/missing-{uuid.uuid4().hex}")
        lines = ["# a comment", pages[0], "not a url", "", pages[1], "ftp://x.example/", missing]
        lines += [pages[2]]
        out = tmp_path / "out.jsonl"
        extra = ("--wait", "--out", str(out), "--poll-interval", "0.2", "--timeout", "90")
        done = run(command(live_api, workspace, tmp_file(tmp_path, "urls.txt", lines), *extra), key)

        assert done.returncode == 1, done.stderr
        assert re.search(r"line 3: invalid", done.stderr), done.stderr
        assert re.search(r"line 6: invalid", done.stderr), done.stderr
        table = summary(done.stderr)
        assert table["entries read"] == 6 and table["invalid"] == 2
        assert table["created (202)"] == 4 and table["settled"] == 4
        assert table["status ready"] == 3 and table["status unavailable"] == 1
        assert key not in done.stderr + done.stdout

        records = {r["line"]: r for r in map(json.loads, out.read_text().splitlines())}
        assert sorted(records) == [2, 3, 5, 6, 7, 8]
        assert records[3]["error"]["code"] == "invalid_line"
        for number, url in ((2, pages[0]), (5, pages[1]), (7, missing), (8, pages[2])):
            record = records[number]
            assert record["url"] == url
            validate_retrieval_payload({"retrieval": record["retrieval"]})
            assert record["retrieval"]["state"] == "completed"
        assert records[7]["retrieval"]["result"]["reason"] == "not_found"
        assert len(rows(workspace)) == 4

    def test_bad_jsonl_lines_are_numbered(
        self, live_api: LiveApi, tenant: tuple[uuid.UUID, str], pages: list[str], tmp_path: Path
    ) -> None:
        """Malformed JSON, a missing url and a bad kind are named by line; the rest go in."""
        workspace, key = tenant
        lines = [
            json.dumps({"url": pages[0]}),
            "{broken",
            json.dumps({"link": pages[1]}),
            json.dumps({"url": pages[1], "kind": "video"}),
            json.dumps({"url": pages[2], "language": "en"}),
        ]
        done = run(command(live_api, workspace, tmp_file(tmp_path, "in.jsonl", lines)), key)
        assert done.returncode == 1, done.stderr
        for number in (2, 3, 4):
            assert f"line {number}: invalid" in done.stderr, done.stderr
        assert "line 1:" not in done.stderr and "line 5:" not in done.stderr
        assert summary(done.stderr)["created (202)"] == 2
        assert sorted(url for url, _ in rows(workspace)) == sorted([pages[0], pages[2]])


class TestResume:
    """Interrupting a run and running it again: every line exactly once."""

    @pytest.mark.parametrize("sigint", ["default", "ignored"])
    def test_interrupted_run_resumes_without_duplicates(
        self,
        live_api: LiveApi,
        tenant: tuple[uuid.UUID, str],
        site: TLSSite,
        tmp_path: Path,
        sigint: str,
    ) -> None:
        """SIGINT mid-batch exits 130 at once, also when started with SIGINT ignored (as a
        script's `cmd &` or `trap '' INT` leaves it); the re-run reports the first ones known
        and creates the rest."""
        workspace, key = tenant
        # Addresses outside the egress allowance settle at once as unsafe_url, without a fetch.
        urls = [f"https://127.0.0.2:{site.port}/resume/{n}" for n in range(150)]
        path = tmp_file(tmp_path, "big.txt", urls)
        # Small chunks, so the run is interrupted part-way through the file.
        args = command(live_api, workspace, path, "--concurrency", "2", "--chunk-size", "5")
        env = {**os.environ, "EVIDENCE_API_KEY": key}
        # A shell that ignores SIGINT, then execs the command: it inherits SIG_IGN.
        start = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *args] if sigint == "ignored" else args
        first = subprocess.Popen(
            start, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            wait_for(lambda: len(rows(workspace)) >= 10, timeout=60, interval=0.02)
            first.send_signal(signal.SIGINT)
            # Generous: interrupted, it stops within a second; ignoring SIGINT, it never would.
            _, stderr = first.communicate(timeout=15)
        finally:
            if first.poll() is None:
                first.kill()
        assert first.returncode == 130, stderr
        assert "interrupted: re-run the same command to resume" in stderr
        known = len(rows(workspace))
        assert 10 <= known < len(urls), "the run must stop part-way"

        second = run(args, key)
        assert second.returncode == 0, second.stderr
        table = summary(second.stderr)
        assert table["already known (200)"] == known
        assert table["created (202)"] == len(urls) - known
        recorded = rows(workspace)
        assert len(recorded) == len(urls)
        assert sorted(url for url, _ in recorded) == sorted(urls)
        assert len({mutation for _, mutation in recorded}) == len(urls)

        third = run(args, key)
        assert third.returncode == 0 and summary(third.stderr)["already known (200)"] == 150
        assert len(rows(workspace)) == len(urls)
        # 150 batch retrievals the session's two worker threads would drain for the tests after
        # this one (the Flower tests' results then waited behind them).
        cancel_open(workspace)
