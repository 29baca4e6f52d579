"""What `evidence enqueue` tells its user: counts, progress, per-line notes, out file, summary.

The out file gets one JSON line per entry (blank and comment lines are not entries), in the order
entries finish, each carrying its `line` number: `{"line", "url", "mutation_id", "retrieval"}` or
`{"line", "url", ["mutation_id"], "error"}`. Without `wait` the retrieval is the POST's answer.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


@dataclass
class Tally:
    """Counts for the progress line, the summary table and the exit code."""

    read: int = 0
    invalid: int = 0
    created: int = 0
    known: int = 0
    rejected: int = 0
    gave_up: int = 0
    settled: int = 0
    unsettled: int = 0
    lost: int = 0
    states: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def count(self, retrieval: dict[str, Any]) -> None:
        """Count one retrieval's final state, result status and reason."""
        self.states[str(retrieval.get("state"))] += 1
        result = retrieval.get("result") or {}
        if result:
            self.statuses[str(result.get("status"))] += 1
            self.reasons[str(result.get("reason") or "-")] += 1

    def line(self) -> str:
        """Render the one-line progress text."""
        return (
            f"submitted {self.created + self.known} (created {self.created}, known {self.known})"
            f" | failed {self.rejected + self.gave_up} | invalid {self.invalid}"
            f" | settled {self.settled}"
        )


def exit_code(tally: Tally) -> int:
    """Map a finished batch to its exit code (see `api.enqueue.client`'s docstring)."""
    return EXIT_FAILED if tally.invalid or tally.rejected or tally.gave_up else EXIT_OK


def summary_table(tally: Tally, waited: bool) -> Table:
    """Build the closing summary: line outcomes, then states, statuses and reasons."""
    table = Table(title="evidence enqueue")
    table.add_column("outcome")
    table.add_column("lines", justify="right")
    rows = [
        ("entries read", tally.read),
        ("invalid", tally.invalid),
        ("created (202)", tally.created),
        ("already known (200)", tally.known),
        ("rejected (4xx)", tally.rejected),
        ("failed to submit (gave up)", tally.gave_up),
    ]
    if waited:
        rows += [("settled", tally.settled), ("unsettled (timeout)", tally.unsettled)]
        rows += [("lost (404 while polling)", tally.lost)]
    for label, counter in (("state", tally.states), ("status", tally.statuses)):
        rows += [(f"{label} {name}", n) for name, n in sorted(counter.items())]
    rows += [(f"reason {name}", n) for name, n in sorted(tally.reasons.items())]
    for label, n in rows:
        table.add_row(label, str(n))
    return table


class Report:
    """The live progress bar (or plain progress lines), per-line notes and the out file."""

    def __init__(self, console: Console, tally: Tally) -> None:
        self.console, self.tally = console, tally
        self.out: IO[str] | None = None
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn())
        self.progress = Progress(
            *columns, TimeElapsedColumn(), console=console, disable=not console.is_terminal
        )
        self.task = self.progress.add_task(tally.line(), total=None)

    def write(self, record: dict[str, Any]) -> None:
        """Append one JSON line to the out file, if any."""
        if self.out is not None:
            self.out.write(json.dumps(record, ensure_ascii=False) + "\n")

    def note(self, message: str) -> None:
        """Print a plain message (no markup: URLs may hold brackets)."""
        self.console.print(message, markup=False, highlight=False, soft_wrap=True)

    def refresh(self) -> None:
        """Update the live progress display."""
        self.progress.update(self.task, description=self.tally.line(), completed=self.tally.settled)

    def waiting_for(self, total: int) -> None:
        """Turn the spinner into a bar: `total` retrievals to see settled."""
        self.progress.update(self.task, total=total, completed=self.tally.settled)

    async def tick(self, interval: float) -> None:
        """Print a progress line every `interval` seconds (for consoles that are not terminals)."""
        while True:
            await asyncio.sleep(interval)
            self.note(self.tally.line())
