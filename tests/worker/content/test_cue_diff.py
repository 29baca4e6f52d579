"""Caption tracks compared cue by cue (`worker.content.cue_diff.match_cues`).

Every answer is checked for its accounting: each old cue is unchanged, shifted, changed or
removed, each new cue unchanged, shifted, changed or added, exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from worker.content import cue_diff
from worker.content.cue_diff import CueDiff, match_cues
from worker.content.results import SegmentDict


def cue(start: int, end: int, text: str) -> SegmentDict:
    return {"start_ms": start, "end_ms": end, "text": text}


def track(count: int = 6, text: str = "Cue {n}: the river rises.") -> list[SegmentDict]:
    """`count` cues, one a second, 800 ms long."""
    return [cue(1_000 * n, 1_000 * n + 800, text.format(n=n)) for n in range(count)]


def moved(cues: Sequence[SegmentDict], offset: int) -> list[SegmentDict]:
    return [cue(c["start_ms"] + offset, c["end_ms"] + offset, c["text"]) for c in cues]


def check(old: Sequence[SegmentDict], new: Sequence[SegmentDict]) -> CueDiff:
    """match_cues(old, new), with its accounting and entry order checked."""
    found = match_cues(old, new)
    kept = found["unchanged"] + found["shifted"] + found["changed"]
    assert kept + found["removed"] == len(old)
    assert kept + found["added"] == len(new)
    entries = found["entries"]
    if not found["truncated"]:
        assert len(entries) == found["changed"] + found["added"] + found["removed"]
    for entry in entries:
        assert (entry["from"] is None) == (entry["change"] == "added")
        assert (entry["to"] is None) == (entry["change"] == "removed")
    return found


def counts(found: CueDiff) -> tuple[int, ...]:
    """(offset, unchanged, shifted, changed, added, removed)."""
    keys = ("offset_ms", "unchanged", "shifted", "changed", "added", "removed")
    return tuple(found[k] for k in keys)  # type: ignore[literal-required]


class TestMatching:
    """Each pass of the matching, on small tracks."""

    def test_identical(self) -> None:
        """The same track: all unchanged, nothing listed."""
        found = check(track(), track())
        assert counts(found) == (0, 6, 0, 0, 0, 0) and found["entries"] == []

    @pytest.mark.parametrize(
        ("old", "new", "expected"),
        [
            ([], [], (0, 0, 0, 0, 0, 0)),
            ([], track(3), (0, 0, 0, 0, 3, 0)),
            (track(3), [], (0, 0, 0, 0, 0, 3)),
        ],
    )
    def test_empty(
        self, old: list[SegmentDict], new: list[SegmentDict], expected: tuple[int, ...]
    ) -> None:
        """An empty side: everything added, or everything removed."""
        assert counts(check(old, new)) == expected

    def test_added_and_removed(self) -> None:
        """A cue inserted and another dropped are listed as such, in time order."""
        old = track()
        new = [*old[:2], cue(2_900, 2_950, "New cue."), *old[3:]]
        found = check(old, new)
        assert counts(found) == (0, 5, 0, 0, 1, 1)
        assert [e["change"] for e in found["entries"]] == ["removed", "added"]
        assert found["entries"][0]["from"] == old[2]

    def test_text_changed_same_timing(self) -> None:
        """The same timing with other words is one changed cue, from and to."""
        old = track()
        new = [*old[:4], cue(4_000, 4_800, "Cue 4: the river falls."), old[5]]
        found = check(old, new)
        assert counts(found) == (0, 5, 0, 1, 0, 0)
        assert found["entries"] == [{"change": "changed", "from": old[4], "to": new[4]}]

    def test_one_timing_many_cues(self) -> None:
        """Many cues at one timing, all reworded: paired in order, each changed once."""
        old = [cue(0, 1_000, f"old {n}") for n in range(cue_diff.MAX_TIMING_CANDIDATES * 3)]
        new = [cue(0, 1_000, f"new {n}") for n in range(len(old))]
        found = check(old, new)
        assert counts(found) == (0, 0, 0, len(old), 0, 0)
        assert [e["to"] for e in found["entries"]] == new

    def test_timing_within_tolerance_is_changed(self) -> None:
        """A cue re-snapped by a few ms (with new text) is still the same cue, changed."""
        old = track(2)
        new = [old[0], cue(1_020, 1_790, "Reworded.")]
        assert counts(check(old, new)) == (0, 1, 0, 1, 0, 0)

    @pytest.mark.parametrize("offset", [500, -700, 12_345])
    def test_constant_shift(self, offset: int) -> None:
        """Every cue moved by one offset: all shifted, the offset given, nothing listed."""
        old = track(count=6)
        old = moved(old, 20_000)
        found = check(old, moved(old, offset))
        assert counts(found) == (offset, 0, 6, 0, 0, 0) and found["entries"] == []

    def test_shift_with_jitter(self) -> None:
        """Frame rounding around the offset (within the tolerance) is still a shift."""
        old = track()
        new = [
            cue(c["start_ms"] + 1_000 + j, c["end_ms"] + 1_000 - j, c["text"])
            for c, j in zip(old, (0, 20, -30, 40, 0, -10), strict=True)
        ]
        assert counts(check(old, new)) == (1_000, 0, 6, 0, 0, 0)

    def test_shift_and_edit(self) -> None:
        """Shifted, one reworded at its shifted timing, one added: two entries."""
        old = track()
        new = moved(old, 500)
        new[3] = cue(new[3]["start_ms"], new[3]["end_ms"], "Cue 3 reworded.")
        new.append(cue(60_000, 61_000, "The end."))
        found = check(old, new)
        assert counts(found) == (500, 0, 5, 1, 1, 0)
        assert [(e["change"], e["to"]["text"]) for e in found["entries"] if e["to"]] == [
            ("changed", "Cue 3 reworded."),
            ("added", "The end."),
        ]

    def test_insert_shifts_the_rest(self) -> None:
        """An inserted passage pushes later cues back: early unchanged, later shifted."""
        old = track(8)
        insert = [cue(4_000, 6_000, "An announcement."), cue(6_000, 8_000, "Back to it.")]
        new = [*old[:4], *insert, *moved(old[4:], 4_000)]
        found = check(old, new)
        assert counts(found) == (4_000, 4, 4, 0, 2, 0)

    def test_lone_retimed_cue_is_changed(self) -> None:
        """One cue moved (no shared offset) within the window: changed, timing only."""
        old = track()
        new = [*old[:2], cue(2_300, 3_100, old[2]["text"]), *old[3:]]
        found = check(old, new)
        assert counts(found) == (0, 5, 0, 1, 0, 0)
        assert found["entries"][0]["to"] == new[2]

    def test_far_move_is_removed_and_added(self) -> None:
        """A cue moved past RETIME_WINDOW_MS, alone: removed there, added here."""
        old = track()
        far = cue(old[1]["start_ms"] + cue_diff.RETIME_WINDOW_MS + 5_000, 99_999, old[1]["text"])
        found = check(old, [old[0], *old[2:], far])
        assert counts(found) == (0, 5, 0, 0, 1, 1)

    def test_repeated_text(self) -> None:
        """Many cues of one text ("[Music]"), all shifted: matched one to one."""
        old = track(300, "[Music]")
        found = check(old, moved(old, 250))
        assert counts(found) == (250, 0, 300, 0, 0, 0)

    def test_dominant_offset_tie_prefers_smaller(self) -> None:
        """Two offsets with equal support: the smaller magnitude wins."""
        old = track(4)
        new = [*moved(old[:2], 3_000), *moved(old[2:], -1_000)]
        assert check(old, new)["offset_ms"] == -1_000


#: The documented tolerance (docs/evidence-diff.md), written out so that changing the constant
#: fails here too; and the first distance past it.
AT_TOLERANCE = 50
PAST_TOLERANCE = 51
#: (start moved, end moved, within the tolerance): each edge of it, for start and end apart.
EDGES = [
    (AT_TOLERANCE, 0, True),
    (-AT_TOLERANCE, 0, True),
    (0, AT_TOLERANCE, True),
    (0, -AT_TOLERANCE, True),
    (AT_TOLERANCE, -AT_TOLERANCE, True),
    (PAST_TOLERANCE, 0, False),
    (-PAST_TOLERANCE, 0, False),
    (0, PAST_TOLERANCE, False),
    (0, -PAST_TOLERANCE, False),
]
EDGE_IDS = [f"start{s:+d}-end{e:+d}" for s, e, _ in EDGES]


class TestTimingTolerance:
    """Timing that differs by at most 50 ms counts as the same, start and end alike; 51 ms
    does not. Each pass that uses the tolerance is pinned on both sides of it."""

    def test_the_constant(self) -> None:
        assert cue_diff.TIMING_TOLERANCE_MS == AT_TOLERANCE

    @pytest.mark.parametrize(("start", "end", "inside"), EDGES, ids=EDGE_IDS)
    def test_changed_same_timing(self, start: int, end: int, inside: bool) -> None:
        """Reworded at nearly the same timing: one changed cue within the tolerance, a cue
        removed and another added past it (other words, so no other pass pairs them)."""
        old = [cue(10_000, 12_000, "The bridge opens at noon.")]
        new = [cue(10_000 + start, 12_000 + end, "The bridge closes at noon.")]
        found = check(old, new)
        if inside:
            assert counts(found) == (0, 0, 0, 1, 0, 0)
            assert found["entries"] == [{"change": "changed", "from": old[0], "to": new[0]}]
        else:
            assert counts(found) == (0, 0, 0, 0, 1, 1)

    @pytest.mark.parametrize(("start", "end", "inside"), EDGES, ids=EDGE_IDS)
    def test_changed_same_timing_after_the_offset(self, start: int, end: int, inside: bool) -> None:
        """The same after a dominant offset: a reworded cue at the shifted timing (± 50)."""
        old = track(6)
        new = moved(old, 3_000)
        new[2] = cue(new[2]["start_ms"] + start, new[2]["end_ms"] + end, "Reworded entirely.")
        found = check(old, new)
        if inside:
            assert counts(found) == (3_000, 0, 5, 1, 0, 0)
        else:
            assert counts(found) == (3_000, 0, 5, 0, 1, 1)

    @pytest.mark.parametrize(("start", "end", "inside"), EDGES, ids=EDGE_IDS)
    def test_shifted(self, start: int, end: int, inside: bool) -> None:
        """A cue moved by the offset ± 50 ms (start or end) is shifted; at 51 ms it is a
        re-timed cue, changed and listed."""
        old = track(6)
        new = moved(old, 1_000)
        new[3] = cue(new[3]["start_ms"] + start, new[3]["end_ms"] + end, old[3]["text"])
        found = check(old, new)
        if inside:
            assert counts(found) == (1_000, 0, 6, 0, 0, 0) and found["entries"] == []
        else:
            assert counts(found) == (1_000, 0, 5, 1, 0, 0)
            assert found["entries"] == [{"change": "changed", "from": old[3], "to": new[3]}]

    @pytest.mark.parametrize(
        ("stretch", "inside"), [(50, True), (-50, True), (51, False), (-51, False)]
    )
    def test_offset_votes(self, stretch: int, inside: bool) -> None:
        """Only pairs whose end moved with their start (± 50 ms) vote for an offset: every
        cue moved by 2 s and stretched by 50 ms is a shift; by 51 ms, each is re-timed."""
        old = track(6)
        new = [cue(c["start_ms"] + 2_000, c["end_ms"] + 2_000 + stretch, c["text"]) for c in old]
        found = check(old, new)
        if inside:
            assert counts(found) == (2_000, 0, 6, 0, 0, 0)
        else:
            assert counts(found) == (0, 0, 0, 6, 0, 0)


class TestBounds:
    """Inputs and listed entries are bounded, and say so."""

    def test_entries_cut_at_count(self) -> None:
        """More changes than MAX_ENTRIES: entries stop there, counts do not."""
        new = [cue(10 * n, 10 * n + 5, f"c{n}") for n in range(cue_diff.MAX_ENTRIES + 10)]
        found = check([], new)
        assert found["truncated"] and len(found["entries"]) == cue_diff.MAX_ENTRIES
        assert found["added"] == cue_diff.MAX_ENTRIES + 10

    def test_entries_cut_at_bytes(self) -> None:
        """Long cues: the listed text stops within MAX_ENTRY_BYTES."""
        new = [cue(1_000 * n, 1_000 * n + 900, f"{n} " + "é" * 9_000) for n in range(20)]
        found = check([], new)
        assert found["truncated"]
        size = sum(len(e["to"]["text"].encode()) for e in found["entries"] if e["to"])
        assert 0 < size <= cue_diff.MAX_ENTRY_BYTES

    def test_input_cut(self) -> None:
        """Past MAX_INPUT_CUES a track is compared only up to the bound, and flagged."""
        old = [cue(10 * n, 10 * n + 5, f"c{n}") for n in range(cue_diff.MAX_INPUT_CUES + 1)]
        found = match_cues(old, old[: cue_diff.MAX_INPUT_CUES])
        assert found["truncated"] and found["unchanged"] == cue_diff.MAX_INPUT_CUES
        assert found["entries"] == []
