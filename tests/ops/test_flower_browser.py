"""Flower's task list in a real browser: every retrieval of a run, with how it ended.

Headless Chromium renders Flower's /tasks page as an operator's browser does (its table is
filled by JavaScript from /tasks/datatable), and the test reads each row's retrieval id, state
and result off the rendered table.
"""

from __future__ import annotations

import ast
import contextlib
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Env, Services
from tests.ops.test_flower import LOGIN, flower, flower_tasks  # noqa: F401  (the fixture)
from tests.support.browser import Browser
from tests.support.factories import Api, body
from tests.support.pages import article
from tests.support.services import wait_for
from tests.support.tls_site import TLSSite

pytestmark = pytest.mark.usefixtures("services")

FIXTURE_PAGES = Path(__file__).parents[1] / "fixtures" / "pages"
#: Batch items: enough that the worker's threads take tokens themselves (follow-ons, fanned-out
#: runs), few enough for one page of the list.
BATCH_ITEMS = 10
#: The worker's log line for each message it was handed.
RECEIVED = re.compile(r"Task evidence\.retrieve_next\[([0-9a-f-]{36})\] received")
#: The rendered table: its column headers and each row's cells, as the page shows them.
READ_TABLE = """
const heads = [...document.querySelectorAll('.dataTables_scrollHead thead th')]
  .map(th => th.innerText.trim().toLowerCase());
const rows = [...document.querySelectorAll('#tasks-table tbody tr')]
  .map(tr => [...tr.querySelectorAll('td')].map(td => td.innerText.trim()));
const info = document.querySelector('#tasks-table_info');
return {heads: heads, rows: rows, info: info ? info.innerText : ''};
"""


def submit_run(api: Api, workspace: uuid.UUID, site: TLSSite) -> dict[str, str]:
    """Ready, blocked and unavailable retrievals, alone and in a batch: {retrieval id: lane}."""
    tag = uuid.uuid4().hex
    ready = site.page(f"/fb/{tag}/ready", article("Flower in a browser"))
    login = site.page(f"/fb/{tag}/login", (FIXTURE_PAGES / "login.html").read_bytes())
    missing = site.url(f"/fb/{tag}/missing")
    lanes = {
        api.post(body(url, workspace)).json()["retrieval"]["id"]: "interactive"
        for url in (ready, login, missing)
    }
    urls = [
        site.page(f"/fb/{tag}/batch-{n}", article(f"Batch {n}")) if n % 3 else missing + f"-{n}"
        for n in range(BATCH_ITEMS)
    ]
    results = api.batch([body(url, workspace) for url in urls]).json()["results"]
    lanes.update({r["retrieval"]["id"]: "batch" for r in results})
    return lanes


def read_task_list(base: str, log: Path) -> dict[str, Any]:
    """The /tasks page as Chromium renders it, 100 rows a page (the page's own menu)."""
    user, password = LOGIN
    with Browser(log) as browser:
        browser.open(f"{base.replace('http://', f'http://{user}:{password}@')}/tasks")

        def loaded() -> bool:
            table = browser.run(READ_TABLE)
            return bool(table["rows"]) and len(table["rows"][0]) > 1

        wait_for(loaded, timeout=30, interval=0.2)
        browser.click(browser.find("#tasks-table_length select option[value='100']"))

        def all_rows() -> dict[str, Any] | None:
            table: dict[str, Any] = browser.run(READ_TABLE)
            shown = re.search(r"to (\d+) of (\d+)", table["info"])
            complete = shown is not None and shown.group(1) == shown.group(2)
            return table if complete and len(table["rows"]) == int(shown.group(2)) else None  # type: ignore[union-attr]

        table: dict[str, Any] = wait_for(all_rows, timeout=30, interval=0.2)  # type: ignore[assignment]
        return table


def listed_done(base: str, ids: set[str]) -> bool:
    """Whether Flower's state has a finished task for every retrieval (read before the page)."""
    done = set()
    for name in ("evidence.retrieve", "evidence.retrieve_next"):
        for task in flower_tasks(base, name).values():
            if task["state"] == "SUCCESS" and task.get("result") and task.get("args"):
                done.update(ast.literal_eval(task["args"]))
    return ids <= done


class TestTaskListInABrowser:
    def test_every_retrieval_is_a_row_with_its_outcome(
        self,
        flower: str,  # noqa: F811
        api: Api,
        workspace: uuid.UUID,
        site: TLSSite,
        services: Services,
        env: Env,
    ) -> None:
        """Ready, blocked and unavailable retrievals, and a batch the worker runs partly without
        a message per retrieval: each is one SUCCESS row whose args name it and whose result
        column says its status and reason, as the API does."""
        before = set(RECEIVED.findall(services.worker.log()))
        lanes = submit_run(api, workspace, site)
        settled = {rid: api.wait(rid, timeout=60) for rid in lanes}
        expected = {
            rid: (r["state"], r["result"]["status"], r["result"]["reason"])
            for rid, r in settled.items()
        }
        assert {status for _, status, _ in expected.values()} == {"ready", "blocked", "unavailable"}
        assert ("completed", "blocked", "login_required") in expected.values()
        assert ("completed", "unavailable", "not_found") in expected.values()
        with contextlib.suppress(TimeoutError):  # the page below says which rows are missing
            wait_for(lambda: listed_done(flower, set(lanes)), timeout=30, interval=0.5)

        table = read_task_list(flower, env.tmp / "chromedriver.log")
        heads = table["heads"]
        for column in ("name", "uuid", "state", "args", "result"):
            assert column in heads, f"Flower's task list has no {column} column: {heads}"
        rows = [dict(zip(heads, cells, strict=True)) for cells in table["rows"]]
        by_rid: dict[str, list[dict[str, str]]] = {}
        for row in rows:
            for rid in ast.literal_eval(row["args"] or "[]"):
                by_rid.setdefault(rid, []).append(row)

        # A batch message's own row names the retrieval it claimed, as a single's does.
        unnamed = [r for r in rows if len(ast.literal_eval(r["args"] or "[]")) != 1]
        assert not unnamed, f"rows without their retrieval id: {unnamed}"
        missing = sorted(rid for rid in lanes if rid not in by_rid)
        assert not missing, f"{len(missing)} of {len(lanes)} retrievals not listed: {rows}"
        for rid, lane in lanes.items():
            assert len(by_rid[rid]) == 1, by_rid[rid]
            row = by_rid[rid][0]
            name = "evidence.retrieve" if lane == "interactive" else "evidence.retrieve_next"
            assert (row["name"], row["state"]) == (name, "SUCCESS"), row
            result = ast.literal_eval(row["result"])
            state, status, reason = expected[rid]
            assert (result["state"], result["status"], result["reason"]) == expected[rid], row
            # What the list shows first in the cell: how it ended.
            assert row["result"].startswith(f"{{'status': '{status}', 'reason': "), row
            assert result["retrieval_id"] == rid

        # Not vacuous: some batch retrievals ran on tokens the worker's threads took themselves
        # (no message, so no row, but for the events this change sends).
        delivered = set(RECEIVED.findall(services.worker.log())) - before
        batch_rows = {by_rid[rid][0]["uuid"] for rid, lane in lanes.items() if lane == "batch"}
        assert batch_rows - delivered, (sorted(batch_rows), sorted(delivered))
