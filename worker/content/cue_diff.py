"""What changed in a caption track between two evidence revisions: cues matched, then listed.

`match_cues(old, new)` pairs the cues of two tracks in passes; each pass considers only the
cues no earlier pass paired:

1. **identical**: same `start_ms`, `end_ms` and text (in track order).
2. **shifted**: the track's dominant offset `D` is the most frequent `new.start - old.start`
   among same-text pairs whose end moved by the same amount (± TIMING_TOLERANCE_MS); it
   counts when at least MIN_SHIFT_CUES pairs agree (ties: the smaller |D|). Same-text cues
   whose start and end both moved by `D` (± tolerance) are "shifted" (nearest to `D` first,
   then earliest): not listed one by one, since `offset_ms` says it all. A track re-timed
   by a constant offset is all "shifted".
3. **changed, same timing**: start and end equal, or equal after `D`, each ± tolerance;
   the text differs (or the timing, within the tolerance). Old cues in time order, each
   with the nearest such new cue.
4. **changed, re-timed**: the same text, starting within RETIME_WINDOW_MS (nearest first).
5. Whatever is left is **removed** (old) or **added** (new).

Bounds: each track is cut to MAX_INPUT_CUES; same-text groups larger than MAX_GROUP_PAIRS
candidate pairs are paired in order instead of by every pair, and pass 3 tries at most
MAX_TIMING_CANDIDATES new cues per old one; the listed entries stop at MAX_ENTRIES or
MAX_ENTRY_BYTES of cue text (`truncated: true`). The counts cover every cue.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, TypedDict

from worker.content.results import SegmentDict

#: Each track is cut to this many cues (the contract's tracks hold at most 1 000).
MAX_INPUT_CUES = 5_000
#: Timing that differs by at most this much counts as the same (rounding, frame snapping).
TIMING_TOLERANCE_MS = 50
#: A same-text cue moved by at most this much is the same cue re-timed.
RETIME_WINDOW_MS = 2_000
#: Pairs that must agree on an offset before the track counts as shifted.
MIN_SHIFT_CUES = 2
#: Candidate pairs tried per text; larger groups are paired in order.
MAX_GROUP_PAIRS = 4_096
#: New cues tried per old cue when pairing by timing (many cues may start together).
MAX_TIMING_CANDIDATES = 64
#: Listed entries stop at this many, or this much cue text (UTF-8 bytes).
MAX_ENTRIES = 1_000
MAX_ENTRY_BYTES = 262_144

Change = Literal["added", "removed", "changed"]
CueChange = TypedDict(
    "CueChange", {"change": Change, "from": SegmentDict | None, "to": SegmentDict | None}
)


class CueDiff(TypedDict):
    """The change from one caption track to another."""

    #: The dominant offset of shifted cues (0 when none was found).
    offset_ms: int
    unchanged: int
    shifted: int
    changed: int
    added: int
    removed: int
    #: Added, removed and changed cues in time order (shifted and unchanged are only counted).
    entries: list[CueChange]
    #: A track or the entries were cut to their bounds.
    truncated: bool


Pair = tuple[int, int]


class _Matching:
    """The cues of both tracks, and which are paired so far (by index)."""

    def __init__(self, old: Sequence[SegmentDict], new: Sequence[SegmentDict]) -> None:
        self.old, self.new = old, new
        self.old_free = dict.fromkeys(range(len(old)))
        self.new_free = dict.fromkeys(range(len(new)))

    def pair(self, i: int, j: int) -> None:
        del self.old_free[i], self.new_free[j]

    def by_key(self, key: Callable[[SegmentDict], object]) -> list[Pair]:
        """Pair free cues with equal keys, earliest first."""
        waiting: dict[object, list[int]] = defaultdict(list)
        for j in self.new_free:
            waiting[key(self.new[j])].append(j)
        pairs = []
        for i in list(self.old_free):
            queue = waiting.get(key(self.old[i]))
            if queue:
                j = queue.pop(0)
                self.pair(i, j)
                pairs.append((i, j))
        return pairs

    def same_text_candidates(self) -> Iterable[Pair]:
        """(old, new) free pairs with equal text, bounded per text by MAX_GROUP_PAIRS."""
        olds: dict[str, list[int]] = defaultdict(list)
        news: dict[str, list[int]] = defaultdict(list)
        for i in self.old_free:
            olds[self.old[i]["text"]].append(i)
        for j in self.new_free:
            news[self.new[j]["text"]].append(j)
        for text, group in olds.items():
            others = news.get(text, [])
            if len(group) * len(others) <= MAX_GROUP_PAIRS:
                yield from ((i, j) for i in group for j in others)
            else:
                yield from zip(group, others, strict=False)

    def moved_by(self, i: int, j: int) -> tuple[int, int]:
        old, new = self.old[i], self.new[j]
        return new["start_ms"] - old["start_ms"], new["end_ms"] - old["end_ms"]


def dominant_offset(matching: _Matching) -> int:
    """The most frequent offset of same-text pairs that moved as a whole, or 0."""
    votes: Counter[int] = Counter()
    for i, j in matching.same_text_candidates():
        start, end = matching.moved_by(i, j)
        if start and abs(end - start) <= TIMING_TOLERANCE_MS:
            votes[start] += 1
    ranked = sorted(votes.items(), key=lambda item: (-item[1], abs(item[0]), item[0]))
    if ranked and ranked[0][1] >= MIN_SHIFT_CUES:
        return ranked[0][0]
    return 0


def _shifted(matching: _Matching, offset: int) -> list[Pair]:
    def fits(pair: Pair) -> bool:
        start, end = matching.moved_by(*pair)
        return max(abs(start - offset), abs(end - offset)) <= TIMING_TOLERANCE_MS

    return _greedy(matching, (p for p in matching.same_text_candidates() if fits(p)), offset)


def _same_timing(matching: _Matching, offset: int) -> list[Pair]:
    """Pair free cues whose start and end agree, after `offset`, within the tolerance.

    Old cues in time order, each with the nearest free new cue among the next
    MAX_TIMING_CANDIDATES by start (paired ones leave the list, so many cues of one timing
    pair in order).
    """
    free = sorted(matching.new_free, key=lambda j: (matching.new[j]["start_ms"], j))
    starts = [matching.new[j]["start_ms"] for j in free]
    pairs = []
    for i in sorted(matching.old_free, key=lambda i: (matching.old[i]["start_ms"], i)):
        low = matching.old[i]["start_ms"] + offset - TIMING_TOLERANCE_MS
        first = bisect.bisect_left(starts, low)
        best: tuple[int, int] | None = None
        for at in range(first, min(len(free), first + MAX_TIMING_CANDIDATES)):
            if starts[at] > low + 2 * TIMING_TOLERANCE_MS:
                break
            start, end = matching.moved_by(i, free[at])
            distance = abs(start - offset) + abs(end - offset)
            if abs(end - offset) <= TIMING_TOLERANCE_MS and (best is None or distance < best[0]):
                best = (distance, at)
        if best is not None:
            j = free.pop(best[1])
            del starts[best[1]]
            matching.pair(i, j)
            pairs.append((i, j))
    return pairs


def _retimed(matching: _Matching) -> list[Pair]:
    candidates = [
        (i, j)
        for i, j in matching.same_text_candidates()
        if abs(matching.moved_by(i, j)[0]) <= RETIME_WINDOW_MS
    ]
    return _greedy(matching, candidates, 0)


def _greedy(matching: _Matching, candidates: Iterable[Pair], offset: int) -> list[Pair]:
    """Pair the candidates nearest to `offset` first (then earliest), each cue at most once."""

    def distance(pair: Pair) -> tuple[int, int, int]:
        start, end = matching.moved_by(*pair)
        return abs(start - offset) + abs(end - offset), pair[0], pair[1]

    pairs = []
    for i, j in sorted(candidates, key=distance):
        if i in matching.old_free and j in matching.new_free:
            matching.pair(i, j)
            pairs.append((i, j))
    return pairs


def _entries(matching: _Matching, changed: list[Pair], offset: int) -> tuple[list[CueChange], bool]:
    """The listed changes in time order, cut to MAX_ENTRIES and MAX_ENTRY_BYTES."""
    old, new = matching.old, matching.new
    timed: list[tuple[int, int, CueChange]] = []
    for i, j in changed:
        timed.append((new[j]["start_ms"], 1, {"change": "changed", "from": old[i], "to": new[j]}))
    for i in matching.old_free:
        timed.append(
            (old[i]["start_ms"] + offset, 0, {"change": "removed", "from": old[i], "to": None})
        )
    for j in matching.new_free:
        timed.append((new[j]["start_ms"], 2, {"change": "added", "from": None, "to": new[j]}))
    timed.sort(key=lambda item: (item[0], item[1]))
    entries: list[CueChange] = []
    size = 0
    for _, _, entry in timed:
        size += sum(len(cue["text"].encode()) for cue in (entry["from"], entry["to"]) if cue)
        if len(entries) == MAX_ENTRIES or size > MAX_ENTRY_BYTES:
            return entries, True
        entries.append(entry)
    return entries, False


def match_cues(old: Sequence[SegmentDict], new: Sequence[SegmentDict]) -> CueDiff:
    """The changes from track `old` to track `new` (see the module's docstring for how)."""
    cut = len(old) > MAX_INPUT_CUES or len(new) > MAX_INPUT_CUES
    matching = _Matching(old[:MAX_INPUT_CUES], new[:MAX_INPUT_CUES])
    unchanged = matching.by_key(lambda c: (c["start_ms"], c["end_ms"], c["text"]))
    offset = dominant_offset(matching)
    shifted = _shifted(matching, offset) if offset else []
    changed = _same_timing(matching, offset)
    if offset:
        changed += _same_timing(matching, 0)
    changed += _retimed(matching)
    entries, cut_entries = _entries(matching, changed, offset)
    return {
        "offset_ms": offset,
        "unchanged": len(unchanged),
        "shifted": len(shifted),
        "changed": len(changed),
        "added": len(matching.new_free),
        "removed": len(matching.old_free),
        "entries": entries,
        "truncated": cut or cut_entries,
    }
