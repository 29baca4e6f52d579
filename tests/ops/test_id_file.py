"""The file through which the overload bench's POSTers hand their retrievals to its pollers
(`bench.id_file`): a reader sees each line once, whole, as the file grows."""

from __future__ import annotations

from pathlib import Path

from bench.id_file import Appender, Created, Tail


def test_tail_reads_whole_lines_once_as_the_file_grows(tmp_path: Path) -> None:
    path = tmp_path / "ids.txt"
    tail = Tail(path)
    assert tail.read() == []  # not written yet
    out = Appender(path)
    out.write(Created("a", 0.0, "pending"))
    with path.open("ab") as f:
        f.write(b"b\t0.05")  # a line caught half written
    assert tail.read() == [Created("a", 0.0, "pending")]
    assert tail.read() == []
    with path.open("ab") as f:
        f.write(b"\trunning\n")
    out.write(Created("c", 0.1, "completed"))
    out.close()
    assert tail.read() == [Created("b", 0.05, "running"), Created("c", 0.1, "completed")]
    assert tail.read() == []
