"""The file through which load clients that only POST hand their retrievals to pollers in
other processes (bench.overload's loaded phase): one line per created retrieval, appended as
its POST is answered, read by the pollers as the file grows."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Created:
    """A retrieval a POST created."""

    id: str
    due_s: float  # when its POST was scheduled, in seconds from the schedule's start
    state: str  # as the POST's answer gave it


def parse(line: str) -> Created:
    rid, due_s, state = line.split("\t")
    return Created(rid, float(due_s), state)


class Appender:
    """Appends `Created` lines to a file that several processes append to."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, created: Created) -> None:
        # One write per line on an O_APPEND file: several writers' lines never interleave.
        os.write(self.fd, f"{created.id}\t{created.due_s:.6f}\t{created.state}\n".encode())

    def close(self) -> None:
        os.close(self.fd)


class Tail:
    """The lines appended to a file since the last `read`, whole lines only: a line still
    being written is kept back until its newline arrives. No file yet reads as empty."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[Created]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *whole, self.partial = (self.partial + data).split(b"\n")
        return [parse(line.decode()) for line in whole if line]
