"""The bounded line diff between two texts (`worker.content.diff`).

Every non-empty unified diff is applied back to the old text and must give the new one, so
the hunks (and their `@@` ranges) are checked, not only the counts.
"""

from __future__ import annotations

import re

import pytest

from worker.content import diff
from worker.content.diff import diff_text

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@$")


def apply(unified: str, old: str) -> list[str]:
    """Apply a unified diff to `old`'s lines, checking every context and removed line."""
    source = old.splitlines()
    lines = unified.splitlines()
    assert lines[0].startswith("--- ") and lines[1].startswith("+++ ")
    result: list[str] = []
    at = 0
    for line in lines[2:]:
        hunk = HUNK.match(line)
        if hunk:
            start, length = int(hunk[1]), int(hunk[2] or 1)
            first = start - 1 if length else start
            result += source[at:first]
            at = first
        elif line[0] == "+":
            result.append(line[1:])
        else:
            assert source[at] == line[1:], (at, line)
            at += 1
            if line[0] == " ":
                result.append(line[1:])
    return result + source[at:]


def check(old: str, new: str, budget: int = diff.MAX_MATCH_WORK) -> diff.TextDiff:
    """diff_text(old, new), with the diff applied back and the counts checked against it."""
    found = diff_text(old, new, budget=budget)
    if found["unified"]:
        assert apply(found["unified"], old) == new.splitlines()
        body = found["unified"].splitlines()[2:]
        assert found["lines_added"] == sum(1 for line in body if line.startswith("+"))
        assert found["lines_removed"] == sum(1 for line in body if line.startswith("-"))
    else:
        assert old.splitlines() == new.splitlines()
        assert found["lines_added"] == found["lines_removed"] == 0
    return found


class TestChanges:
    """Inserts, deletes and replacements, each shown as `diff -u` would."""

    @pytest.mark.parametrize(
        ("old", "new", "added", "removed"),
        [
            ("a\nb\nc", "a\nb\nX\nc", 1, 0),
            ("a\nb\nc", "X\na\nb\nc", 1, 0),
            ("a\nb\nc", "a\nb\nc\nX", 1, 0),
            ("a\nb\nc", "a\nc", 0, 1),
            ("a\nb\nc", "b\nc", 0, 1),
            ("a\nb\nc", "a\nX\nc", 1, 1),
            ("a\nb\nc", "x\ny", 2, 3),
            ("", "a\nb", 2, 0),
            ("a\nb", "", 0, 2),
            ("\n".join("abcdefghijklmnop"), "\n".join("abcXefghijklmnoY"), 2, 2),
        ],
    )
    def test_counts_and_hunks(self, old: str, new: str, added: int, removed: int) -> None:
        """The counts are the diff's + and - lines, and the diff turns old into new."""
        found = check(old, new)
        assert (found["lines_added"], found["lines_removed"]) == (added, removed)
        assert not found["approximate"] and not found["truncated"]

    def test_exact_output(self) -> None:
        """Headers name the sides; three context lines; distant changes are separate hunks."""
        old = "\n".join(str(n) for n in range(1, 21))
        new = old.replace("2\n", "two\n", 1).replace("19", "nineteen")
        found = diff_text(old, new, labels=("revision 1", "revision 2"))
        assert found["unified"].splitlines() == [
            "--- revision 1",
            "+++ revision 2",
            "@@ -1,5 +1,5 @@",
            " 1",
            "-2",
            "+two",
            " 3",
            " 4",
            " 5",
            "@@ -16,5 +16,5 @@",
            " 16",
            " 17",
            " 18",
            "-19",
            "+nineteen",
            " 20",
        ]

    def test_empty_ranges(self) -> None:
        """An empty side's range is `0,0` (the line before it), as diff -u writes it."""
        assert diff_text("", "x")["unified"].splitlines()[2] == "@@ -0,0 +1 @@"
        assert diff_text("x\ny", "")["unified"].splitlines()[2] == "@@ -1,2 +0,0 @@"

    @pytest.mark.parametrize(("old", "new"), [("", ""), ("same\ntext", "same\ntext"), ("a\n", "a")])
    def test_equal_is_empty(self, old: str, new: str) -> None:
        """Equal texts (a final line break aside) have an empty diff."""
        assert diff_text(old, new) == {
            "unified": "",
            "lines_added": 0,
            "lines_removed": 0,
            "approximate": False,
            "truncated": False,
        }

    def test_unicode(self) -> None:
        """Non-ASCII lines survive as they are; U+2028 breaks a line, as str.splitlines does."""
        old = "Zürich\nnaïve café\n東京の川\nעברית"
        new = "Zürich\nnaïve café ☕\n東京の川\u2028二\nעברית"
        found = check(old, new)
        assert found["unified"].splitlines()[3:8] == [
            " Zürich",
            "-naïve café",
            "+naïve café ☕",
            " 東京の川",
            "+二",
        ]
        assert (found["lines_added"], found["lines_removed"]) == (2, 1)


class TestBounds:
    """The work, the inputs and the output are bounded, and say so."""

    def test_repeated_lines_are_approximate(self) -> None:
        """Texts of repeated lines exceed the work budget: ends kept, middle replaced."""
        old = "\n".join(["head", *["x", "y", "z"] * 700, "tail"])
        new = "\n".join(["head", *["y", "x"] * 1_000, "tail"])
        found = check(old, new)
        assert found["approximate"] and not found["truncated"]
        assert (found["lines_added"], found["lines_removed"]) == (2_000, 2_100)

    def test_budget_zero_keeps_common_ends(self) -> None:
        """With no budget the diff is the common head and tail around one replacement."""
        found = check("a\nb\nc\nd", "a\nX\nY\nd", budget=0)
        assert found["approximate"]
        assert found["unified"].splitlines()[2:] == [
            "@@ -1,4 +1,4 @@",
            " a",
            "-b",
            "-c",
            "+X",
            "+Y",
            " d",
        ]

    def test_many_changes_cut_at_line_bound(self) -> None:
        """More changed lines than MAX_OUTPUT_LINES: the output is cut, the counts are not."""
        count = diff.MAX_OUTPUT_LINES
        found = diff_text(
            "\n".join(f"o{n}" for n in range(count)), "\n".join(f"n{n}" for n in range(count))
        )
        assert found["truncated"] and not found["approximate"]
        assert len(found["unified"].splitlines()) == diff.MAX_OUTPUT_LINES
        assert (found["lines_added"], found["lines_removed"]) == (count, count)

    def test_output_cut_at_byte_bound(self) -> None:
        """Long multi-byte lines: the output stops, at a line, within MAX_OUTPUT_BYTES."""
        new = "\n".join(f"{n} " + "é" * 1_000 for n in range(300))
        found = diff_text("", new)
        assert found["truncated"]
        size = len(found["unified"].encode()) + 1
        assert diff.MAX_OUTPUT_BYTES - 2_100 < size <= diff.MAX_OUTPUT_BYTES
        assert found["unified"].splitlines()[-1].endswith("é")
        assert found["lines_added"] == 300

    def test_huge_input_is_cut(self) -> None:
        """Past MAX_INPUT_CHARS a text is compared only up to the bound, and flagged."""
        size = diff.MAX_INPUT_CHARS
        old = "line\n" * (size // 5)
        found = diff_text(old, old + "beyond the bound\n")
        assert found["truncated"] and found["unified"] == ""

    def test_too_many_lines_are_cut(self) -> None:
        """Past MAX_INPUT_LINES the lines beyond are not compared."""
        old = "\n".join(str(n) for n in range(diff.MAX_INPUT_LINES))
        found = diff_text(old, old + "\nextra")
        assert found["truncated"] and found["lines_added"] == 0
