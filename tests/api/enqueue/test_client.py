"""Tests of the `evidence enqueue` client against a real HTTP stand-in of the API on loopback.

The stand-in (`tests.support.fake_api`) serves the batch routes the client uses; the client
against the real service is `tests/ops/test_enqueue_e2e.py`.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from rich.console import Console

from api.enqueue import client as enqueue
from api.enqueue.client import (
    MIN_WATCHED,
    EnqueueOptions,
    RetryPolicy,
    Tally,
    backoff_delay,
    enqueue_batch,
    exit_code,
    parse_retry_after,
    run_enqueue,
    watched_next,
)
from api.enqueue.input import mutation_id
from tests.support.fake_api import FakeApi
from tests.support.slowdown import scaled

WS = UUID("11111111-1111-4111-8111-111111111111")
FAST = RetryPolicy(attempts=4, base_delay=0.001, max_delay=0.01)


def make_console(terminal: bool = False) -> Console:
    """A console that records into memory, as a pipe (default) or a terminal."""
    return Console(file=io.StringIO(), width=200, force_terminal=terminal, color_system=None)


def output(console: Console) -> str:
    """Everything printed so far."""
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def urls(n: int, prefix: str = "https://site.example/page") -> list[str]:
    return [f"{prefix}/{i}" for i in range(n)]


def write_list(tmp_path: Path, lines: list[str], name: str = "urls.txt") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def options(server: FakeApi | str, path: Path, **changes: Any) -> EnqueueOptions:
    """Options for a fast run against `api`, as the command would build them."""
    base = EnqueueOptions(
        file=str(path),
        workspace=WS,
        kind="url_text",
        language=None,
        api=server if isinstance(server, str) else server.url,
        key="good-key",
        concurrency=4,
        wait=False,
        out=path.parent / "out.jsonl",
        batch=None,
        poll_interval=0.01,
        retry=FAST,
        console=make_console(),
    )
    for name, value in changes.items():
        setattr(base, name, value)
    return base


def read_out(opts: EnqueueOptions) -> list[dict[str, Any]]:
    assert opts.out is not None
    return [json.loads(line) for line in opts.out.read_text().splitlines()]


def summary_row(text: str, label: str) -> int:
    """Read the count of one row of the summary table."""
    for row in text.splitlines():
        cells = [cell.strip() for cell in row.strip("│┃ ").split("│")]
        if len(cells) == 2 and cells[0] == label:
            return int(cells[1])
    raise AssertionError(f"no summary row {label!r} in:\n{text}")


@pytest.fixture
def api() -> Any:
    with FakeApi() as server:
        yield server


class TestSubmit:
    def test_every_line_created_once(self, api: FakeApi, tmp_path: Path) -> None:
        """Each valid line is POSTed once with its derived mutation_id; exit 0."""
        lines = urls(12)
        opts = options(api, write_list(tmp_path, lines), language="en")
        assert run_enqueue(opts) == 0
        expected = {str(mutation_id(WS, "url_text", "en", url)) for url in lines}
        assert {mid for (_, mid) in api.created} == expected
        assert set(api.created.values()) == {1}
        assert {r.language for r in api.table.values()} == {"en"}
        out = read_out(opts)
        assert sorted(o["line"] for o in out) == list(range(1, 13))
        assert all(o["retrieval"]["state"] == "pending" for o in out)
        assert summary_row(output(opts.console), "created (202)") == 12

    def test_max_age_is_sent_with_every_batch(self, api: FakeApi, tmp_path: Path) -> None:
        """`--max-age N` sends `Cache-Control: max-age=N` with each batch; none without it."""
        opts = options(api, write_list(tmp_path, urls(5)), chunk_size=2, max_age=600)
        assert run_enqueue(opts) == 0
        assert api.cache_controls == ["max-age=600"] * 3
        again = options(api, write_list(tmp_path, urls(1, "https://other.example")))
        assert run_enqueue(again) == 0
        assert api.cache_controls[-1] == ""
        assert enqueue.validate_options(options(api, tmp_path / "urls.txt", max_age=-1))

    def test_csv_overrides_reach_the_server(self, api: FakeApi, tmp_path: Path) -> None:
        """Per-row kind and language from a CSV are what the server records."""
        path = tmp_path / "in.csv"
        path.write_text(
            "url,kind,language\nhttps://a.example/1,,\nhttps://a.example/2,published_captions,fr\n"
        )
        assert run_enqueue(options(api, path, language="de")) == 0
        seen = {r.url: (r.kind, r.language) for r in api.table.values()}
        assert seen == {
            "https://a.example/1": ("url_text", "de"),
            "https://a.example/2": ("published_captions", "fr"),
        }

    def test_concurrency_is_bounded(self, api: FakeApi, tmp_path: Path) -> None:
        """No more requests are in flight than --concurrency."""
        api.delay_seconds = 0.02
        opts = options(api, write_list(tmp_path, urls(30)), concurrency=3, chunk_size=1)
        assert run_enqueue(opts) == 0
        assert 2 <= api.max_in_flight <= 3
        assert len(api.created) == 30

    def test_chunks_of_chunk_size(self, api: FakeApi, tmp_path: Path) -> None:
        """Lines go in batch requests of --chunk-size (1 000 by default), in order."""
        assert run_enqueue(options(api, write_list(tmp_path, urls(2500)), concurrency=1)) == 0
        assert api.batches == [1000, 1000, 500]
        assert run_enqueue(options(api, write_list(tmp_path, urls(25)), chunk_size=10)) == 0
        assert sorted(api.batches[3:]) == [5, 10, 10]
        assert len(api.created) == 2500

    def test_invalid_lines_reported_and_skipped(self, api: FakeApi, tmp_path: Path) -> None:
        """Invalid lines are reported with their number, skipped, and make the exit code 1."""
        lines = [
            "# list",
            "https://a.example/1",
            "not a url",
            "",
            "ftp://a.example/x",
            "https://a.example/2",
        ]
        opts = options(api, write_list(tmp_path, lines))
        assert run_enqueue(opts) == 1
        text = output(opts.console)
        assert "line 3: invalid" in text and "line 5: invalid" in text
        assert {r.url for r in api.table.values()} == {"https://a.example/1", "https://a.example/2"}
        errors = {o["line"]: o["error"]["code"] for o in read_out(opts) if "error" in o}
        assert errors == {3: "invalid_line", 5: "invalid_line"}
        assert summary_row(text, "invalid") == 2

    def test_rejected_line_not_retried(self, api: FakeApi, tmp_path: Path) -> None:
        """A 422 fails that line once, without retry; the other lines go through."""
        lines = urls(3)
        api.faults[lines[1]] = ["422"]
        opts = options(api, write_list(tmp_path, lines))
        assert run_enqueue(opts) == 1
        assert api.attempts[lines[1]] == 1
        failed = [o for o in read_out(opts) if "error" in o]
        assert failed == [
            {
                "line": 2,
                "url": lines[1],
                "mutation_id": str(mutation_id(WS, "url_text", None, lines[1])),
                "error": {
                    "code": "invalid_input",
                    "message": "scripted",
                    "field": "url",
                    "http_status": 422,
                },
            }
        ]
        assert summary_row(output(opts.console), "rejected (4xx)") == 1

    def test_conflicting_mutation_is_409(self, api: FakeApi, tmp_path: Path) -> None:
        """A mutation_id the server knows with another payload is a reported 409, not retried."""
        url = "https://a.example/1"
        api.seed(str(WS), str(mutation_id(WS, "url_text", None, url)), "https://elsewhere.example/")
        opts = options(api, write_list(tmp_path, [url]))
        assert run_enqueue(opts) == 1
        assert api.attempts[url] == 1
        assert read_out(opts)[0]["error"]["field"] == "mutation_id"


class TestRetry:
    def test_503_retried_until_accepted(self, api: FakeApi, tmp_path: Path) -> None:
        """503s with Retry-After are retried and the line is then created once."""
        lines = urls(3)
        api.faults[lines[0]] = ["503", "503"]
        assert run_enqueue(options(api, write_list(tmp_path, lines))) == 0
        assert api.attempts[lines[0]] == 3
        assert len(api.created) == 3 and set(api.created.values()) == {1}

    def test_retry_after_is_honoured(self, api: FakeApi, tmp_path: Path) -> None:
        """The client waits at least Retry-After seconds before trying again."""
        api.retry_after = "1"
        api.faults["https://a.example/1"] = ["503"]
        started = time.monotonic()
        assert run_enqueue(options(api, write_list(tmp_path, ["https://a.example/1"]))) == 0
        assert time.monotonic() - started >= 1.0

    def test_connection_drops_retried(self, api: FakeApi, tmp_path: Path) -> None:
        """Connections dropped mid-response are retried."""
        lines = urls(4)
        api.faults[lines[2]] = ["drop", "drop"]
        assert run_enqueue(options(api, write_list(tmp_path, lines))) == 0
        assert api.attempts[lines[2]] == 3 and len(api.created) == 4

    def test_drop_after_create_becomes_known(self, api: FakeApi, tmp_path: Path) -> None:
        """An answer lost after the server recorded the line is retried: 200, no duplicate."""
        api.faults["https://a.example/1"] = ["drop_after_create"]
        opts = options(api, write_list(tmp_path, ["https://a.example/1"]))
        assert run_enqueue(opts) == 0
        assert list(api.created.values()) == [1]
        assert summary_row(output(opts.console), "already known (200)") == 1

    def test_gives_up_after_bounded_attempts(self, api: FakeApi, tmp_path: Path) -> None:
        """A line that keeps failing is tried `attempts` times, then counted as failed to submit."""
        api.faults["https://a.example/1"] = ["503"] * 10
        lines = ["https://a.example/1", "https://a.example/2"]
        opts = options(api, write_list(tmp_path, lines), chunk_size=1)  # a request per line
        assert run_enqueue(opts) == 1
        assert api.attempts["https://a.example/1"] == FAST.attempts
        error = next(o["error"] for o in read_out(opts) if "error" in o)
        assert error["code"] == "upstream_unavailable" and "gave up after 4" in error["message"]
        assert summary_row(output(opts.console), "failed to submit (gave up)") == 1

    def test_items_refused_for_a_quota_are_sent_again(self, api: FakeApi, tmp_path: Path) -> None:
        """Items answered 429 go again after their Retry-After; the others are not resent."""
        api.retry_after = "0.2"
        lines = urls(3)
        api.faults[lines[1]] = ["429", "429"]
        started = time.monotonic()
        assert run_enqueue(options(api, write_list(tmp_path, lines))) == 0
        assert time.monotonic() - started >= 0.4
        assert api.attempts[lines[1]] == 3 and api.attempts[lines[0]] == 1
        assert api.batches == [3, 1, 1]
        assert len(api.created) == 3 and set(api.created.values()) == {1}

    def test_quota_refusals_give_up(self, api: FakeApi, tmp_path: Path) -> None:
        """An item refused every time is counted as failed to submit after `attempts` tries."""
        api.faults["https://a.example/1"] = ["429"] * 10
        opts = options(api, write_list(tmp_path, ["https://a.example/1", "https://a.example/2"]))
        assert run_enqueue(opts) == 1
        assert api.attempts["https://a.example/1"] == FAST.attempts
        error = next(o["error"] for o in read_out(opts) if "error" in o)
        assert error["code"] == "rate_limited" and error["http_status"] == 429
        assert "gave up after 4" in error["message"]
        assert summary_row(output(opts.console), "failed to submit (gave up)") == 1
        assert summary_row(output(opts.console), "created (202)") == 1

    def test_unreachable_api_fails_lines(self, tmp_path: Path) -> None:
        """With nothing listening, every line fails to submit after its retries; exit 1."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        opts = options(f"http://127.0.0.1:{port}", write_list(tmp_path, urls(3)))
        assert run_enqueue(opts) == 1
        out = read_out(opts)
        assert len(out) == 3 and {o["error"]["code"] for o in out} == {"transport_error"}


class TestAuthAndUsage:
    def test_401_aborts_with_exit_2(self, api: FakeApi, tmp_path: Path) -> None:
        """A wrong key stops the batch at once with a clear message and exit 2."""
        opts = options(api, write_list(tmp_path, urls(50)), key="wrong")
        assert run_enqueue(opts) == 2
        assert "refused the key (401" in output(opts.console)
        assert not api.table

    def test_403_aborts_with_exit_2(self, tmp_path: Path) -> None:
        """A key without access to the workspace stops the batch with exit 2."""
        with FakeApi(keys={"good-key": {"another-workspace"}}) as server:
            opts = options(server, write_list(tmp_path, urls(20)))
            assert run_enqueue(opts) == 2
            assert "refused the key (403" in output(opts.console)
            assert not server.table

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            ({"file": "/nonexistent/urls.txt"}, "no such file"),
            ({"key": ""}, "no API key"),
            ({"kind": "video"}, "kind must be"),
            ({"language": "english!"}, "language must be"),
            ({"concurrency": 0}, "concurrency"),
            ({"chunk_size": 1001}, "chunk-size"),
            ({"api": "127.0.0.1:8000"}, "--api"),
        ],
    )
    def test_usage_errors_exit_2(
        self, api: FakeApi, tmp_path: Path, change: dict, message: str
    ) -> None:
        """Bad options exit 2 before any request."""
        opts = options(api, write_list(tmp_path, urls(2)), **change)
        assert run_enqueue(opts) == 2
        assert message in output(opts.console)
        assert not api.attempts

    def test_csv_without_url_column_exit_2(self, api: FakeApi, tmp_path: Path) -> None:
        """A CSV whose header has no url column is a usage error, nothing is sent."""
        path = tmp_path / "in.csv"
        path.write_text("link\nhttps://a.example/1\n")
        opts = options(api, path)
        assert run_enqueue(opts) == 2
        assert "no 'url' column" in output(opts.console) and not api.attempts


class TestWait:
    def test_one_settled_line_per_input_line(self, api: FakeApi, tmp_path: Path) -> None:
        """--wait --out writes one line per entry, with settled retrievals or the error."""
        lines = [*urls(5), "bad url", "https://a.example/missing"]
        opts = options(api, write_list(tmp_path, lines), wait=True)
        assert run_enqueue(opts) == 1  # the invalid line
        out = sorted(read_out(opts), key=lambda o: o["line"])
        assert [o["line"] for o in out] == list(range(1, 8))
        assert out[5] == {"line": 6, "url": None, "error": out[5]["error"]}
        settled = [o for o in out if "retrieval" in o]
        assert len(settled) == 6 and {o["retrieval"]["state"] for o in settled} == {"completed"}
        assert out[6]["retrieval"]["result"]["reason"] == "not_found"
        text = output(opts.console)
        assert summary_row(text, "state completed") == 6
        assert summary_row(text, "status ready") == 5
        assert summary_row(text, "status unavailable") == 1
        assert summary_row(text, "reason not_found") == 1
        assert summary_row(text, "settled") == 6

    def test_polls_only_until_settled(self, tmp_path: Path) -> None:
        """Each retrieval is polled until it settles and no more."""
        with FakeApi(settle_after=3) as server:
            opts = options(server, write_list(tmp_path, urls(8)), wait=True)
            assert run_enqueue(opts) == 0
            assert server.gets == 8 * 3

    def test_timeout_counts_unsettled(self, tmp_path: Path) -> None:
        """When --timeout passes, unsettled lines are written as they stand and counted; exit 0."""
        with FakeApi(settle_after=10**9) as server:
            opts = options(server, write_list(tmp_path, urls(4)), wait=True, timeout=0.3)
            started = time.monotonic()
            assert run_enqueue(opts) == 0
            assert time.monotonic() - started < scaled(3)  # it stopped waiting at 0.3 s
            assert {o["retrieval"]["state"] for o in read_out(opts)} == {"pending"}
            assert summary_row(output(opts.console), "unsettled (timeout)") == 4

    def test_already_settled_lines_not_polled(self, tmp_path: Path) -> None:
        """Lines whose POST answer is already settled are written without polling."""
        with FakeApi(settle_after=0) as server:
            opts = options(server, write_list(tmp_path, urls(3)), wait=True)
            assert run_enqueue(opts) == 0
            assert server.gets == 0
            assert {o["retrieval"]["state"] for o in read_out(opts)} == {"completed"}

    def test_rounds_read_the_oldest_chunk(self, tmp_path: Path) -> None:
        """Each round reads the oldest `chunk_size` unsettled lines; the last one reads all."""
        with FakeApi(settle_after=10**9) as server:
            opts = options(
                server,
                write_list(tmp_path, urls(40)),
                wait=True,
                timeout=0.6,
                poll_interval=0.05,
                chunk_size=10,
                concurrency=1,
            )
            assert run_enqueue(opts) == 0
            polls = [record.polls for record in server.by_id.values()]
        oldest, rest = sorted(polls[:10]), sorted(polls[10:])
        assert oldest[0] == oldest[-1] > 2  # every round, then the last look
        assert rest == [1] * 30  # only the last look
        assert summary_row(output(opts.console), "unsettled (timeout)") == 40

    def test_rounds_grow_with_the_pace_of_settling(self, tmp_path: Path) -> None:
        """A round whose lines had all settled is followed at once by one twice as large."""
        with FakeApi(settle_after=1) as server:
            opts = options(server, write_list(tmp_path, urls(300)), wait=True, poll_interval=30)
            assert run_enqueue(opts) == 0
        assert server.read_sizes == [100, 200]
        assert server.reads[1] - server.reads[0] < 30  # no pause between them
        assert summary_row(output(opts.console), "settled") == 300

    def test_rounds_read_the_oldest_hundred_while_nothing_settles(self, tmp_path: Path) -> None:
        """With nothing settling, rounds read the oldest `MIN_WATCHED` lines, not a whole
        chunk; the last look reads every line."""
        with FakeApi(settle_after=10**9) as server:
            opts = options(
                server, write_list(tmp_path, urls(300)), wait=True, timeout=0.5, poll_interval=0.05
            )
            assert run_enqueue(opts) == 0
        *rounds, last = server.read_sizes
        assert len(rounds) >= 2 and set(rounds) == {MIN_WATCHED} and last == 300

    @pytest.mark.parametrize(
        ("watched", "settled", "most", "expected"),
        [
            (100, 0, 1000, 100),  # nothing settled: never below the floor
            (100, 100, 1000, 200),  # all settled: twice as many
            (600, 600, 1000, 1000),  # capped at the chunk size
            (800, 0, 1000, 400),  # a stalled front: half as many
            (800, 300, 1000, 600),  # twice the pace
            (10, 10, 10, 10),  # a chunk size below the floor caps it
        ],
    )
    def test_watched_next(self, watched: int, settled: int, most: int, expected: int) -> None:
        assert watched_next(watched, settled, most) == expected

    def test_long_polls_at_most_one_round_per_interval(self, tmp_path: Path) -> None:
        """Reads ask the API to hold the answer (`Prefer: wait`) and are poll_interval apart."""
        with FakeApi(settle_after=3) as server:
            opts = options(server, write_list(tmp_path, urls(6)), wait=True, poll_interval=0.3)
            assert run_enqueue(opts) == 0
        assert server.gets == 6 * 3
        assert server.prefers == ["wait=30"] * 3
        gaps = [b - a for a, b in zip(server.reads, server.reads[1:], strict=False)]
        # Seen by the server, a gap is the client's pause plus the difference of two requests'
        # transit times (tens of ms on a busy machine); unpaced rounds would be ms apart.
        assert len(gaps) == 2 and min(gaps) >= 0.2, gaps

    def test_unknown_retrieval_is_lost(self, tmp_path: Path) -> None:
        """A retrieval the API answers null for is written as not found and not read again."""
        with FakeApi(settle_after=2) as server:
            opts = options(server, write_list(tmp_path, urls(2)), wait=True)
            tally = Tally()

            async def run_and_forget_one() -> None:
                task = asyncio.create_task(enqueue_batch(opts, make_console(), tally))
                while len(server.by_id) < 2:
                    await asyncio.sleep(0.001)
                server.by_id.pop(next(iter(server.by_id)))
                await task

            asyncio.run(run_and_forget_one())
        assert tally.lost == 1 and tally.settled == 1
        errors = [o["error"] for o in read_out(opts) if "error" in o]
        assert errors == [{"code": "not_found", "message": "no such retrieval"}]


class TestResume:
    def test_rerun_reports_known_and_creates_nothing(self, api: FakeApi, tmp_path: Path) -> None:
        """Running the same file twice creates each mutation once; the rerun sees 200s."""
        path = write_list(tmp_path, urls(10))
        assert run_enqueue(options(api, path)) == 0
        again = options(api, path)
        assert run_enqueue(again) == 0
        assert len(api.created) == 10 and set(api.created.values()) == {1}
        assert summary_row(output(again.console), "already known (200)") == 10
        assert summary_row(output(again.console), "created (202)") == 0

    def test_batch_label_starts_fresh(self, api: FakeApi, tmp_path: Path) -> None:
        """A new --batch label gives new mutation ids, so the same URLs are fetched again."""
        path = write_list(tmp_path, urls(3))
        assert run_enqueue(options(api, path)) == 0
        assert run_enqueue(options(api, path, batch="second")) == 0
        assert len(api.created) == 6

    def test_cancel_midway_then_resume(self, api: FakeApi, tmp_path: Path) -> None:
        """A run cancelled mid-way resumes on rerun: no duplicates, the first part is known."""
        api.delay_seconds = 0.01
        path = write_list(tmp_path, urls(60))

        async def first_run() -> Tally:
            tally = Tally()
            opts = options(api, path, chunk_size=5)
            task = asyncio.create_task(enqueue_batch(opts, make_console(), tally))
            while len(api.created) < 10:
                await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return tally

        tally = asyncio.run(first_run())
        while api.in_flight:  # requests the server had already accepted still finish
            time.sleep(0.01)
        first = len(api.created)
        assert 10 <= first < 60 and tally.created <= first
        again = options(api, path)
        assert run_enqueue(again) == 0
        assert len(api.created) == 60 and set(api.created.values()) == {1}
        assert summary_row(output(again.console), "already known (200)") == first
        assert summary_row(output(again.console), "created (202)") == 60 - first

    def test_ctrl_c_exits_130_and_resumes(self, api: FakeApi, tmp_path: Path) -> None:
        """A real SIGINT mid-batch exits 130 with a resume hint; the rerun completes the rest."""
        api.delay_seconds = 0.01
        path = write_list(tmp_path, urls(60))

        def interrupt() -> None:
            while len(api.created) < 10:
                time.sleep(0.005)
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        opts = options(api, path, chunk_size=5)
        assert run_enqueue(opts) == 130
        assert "re-run the same command to resume" in output(opts.console)
        while api.in_flight:
            time.sleep(0.01)
        first = len(api.created)
        assert first < 60
        assert run_enqueue(options(api, path)) == 0
        assert len(api.created) == 60 and set(api.created.values()) == {1}


class TestProgress:
    def test_plain_lines_when_not_a_terminal(
        self, api: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A non-terminal console gets periodic plain progress lines, no escape codes."""
        monkeypatch.setattr(enqueue, "PLAIN_PROGRESS_SECONDS", 0.02)
        api.delay_seconds = 0.01
        opts = options(api, write_list(tmp_path, urls(30)), concurrency=2, chunk_size=1)
        assert run_enqueue(opts) == 0
        text = output(opts.console)
        assert text.count("submitted ") >= 3
        assert "submitted 30 (created 30, known 0) | failed 0 | invalid 0" in text
        assert "\x1b[" not in text

    def test_live_display_on_a_terminal(self, api: FakeApi, tmp_path: Path) -> None:
        """A terminal console gets the live display and still the summary table."""
        opts = options(api, write_list(tmp_path, urls(5)), wait=True, console=make_console(True))
        assert run_enqueue(opts) == 0
        text = output(opts.console)
        assert "\x1b[" in text and "evidence enqueue" in text


class TestPolicy:
    def test_backoff_grows_and_caps(self) -> None:
        """The ceiling doubles per attempt up to max_delay; jitter scales it down."""
        policy = RetryPolicy(base_delay=0.5, max_delay=3.0)
        assert [backoff_delay(policy, n, None, lambda: 1.0) for n in range(1, 6)] == [
            0.5,
            1.0,
            2.0,
            3.0,
            3.0,
        ]
        assert backoff_delay(policy, 4, None, lambda: 0.0) == 0.0

    def test_backoff_honours_capped_retry_after(self) -> None:
        """Retry-After is a floor on the delay, itself capped by max_retry_after."""
        policy = RetryPolicy(base_delay=0.5, max_retry_after=10.0)
        assert backoff_delay(policy, 1, 4.0, lambda: 1.0) == 4.0
        assert backoff_delay(policy, 1, 3600.0, lambda: 1.0) == 10.0

    def test_parse_retry_after(self) -> None:
        """Retry-After is read as seconds or as an HTTP date; junk is ignored."""
        now = datetime(2099, 1, 1, tzinfo=UTC)
        assert parse_retry_after("7") == 7.0
        assert parse_retry_after("-3") == 0.0
        assert (
            parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now)
            == 30.0
        )
        assert parse_retry_after("soon") is None and parse_retry_after(None) is None

    def test_exit_code(self) -> None:
        """0 when nothing failed; 1 for any invalid, rejected or given-up line."""
        assert exit_code(Tally(created=3, known=2, unsettled=1)) == 0
        assert exit_code(Tally(created=3, invalid=1)) == 1
        assert exit_code(Tally(created=3, rejected=1)) == 1
        assert exit_code(Tally(created=3, gave_up=1)) == 1
