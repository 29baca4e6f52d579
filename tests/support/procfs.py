"""What /proc says about the processes a test started: children, command lines."""

from __future__ import annotations

import subprocess
from pathlib import Path


def children(pid: int) -> list[int]:
    """The pids of `pid`'s direct children."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


def command_line(pid: int) -> str:
    """`pid`'s command line, its arguments joined by spaces."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
