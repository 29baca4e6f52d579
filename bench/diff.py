"""Time the evidence diffs (worker/content/diff.py, cue_diff.py) on typical and hostile inputs.

Run: .venv/bin/python -m bench.diff   (prints one line per case: seconds, and the answer's flags)
"""

import random
import time
from collections.abc import Callable
from typing import Any

from worker.content.cue_diff import match_cues
from worker.content.diff import diff_text
from worker.content.results import SegmentDict

random.seed(20261201)
WORDS = [f"w{n}" for n in range(5_000)]


def lines(count: int) -> list[str]:
    return [" ".join(random.choices(WORDS, k=12)) for _ in range(count)]


def edited(source: list[str], share: float) -> list[str]:
    out = list(source)
    for _ in range(int(len(out) * share)):
        out[random.randrange(len(out))] = " ".join(random.choices(WORDS, k=12))
    return out


def cue(start: int, end: int, text: str) -> SegmentDict:
    return {"start_ms": start, "end_ms": end, "text": text}


def run(label: str, fn: Callable[[], dict[str, Any]], keys: tuple[str, ...]) -> None:
    started = time.perf_counter()
    answer = fn()
    elapsed = time.perf_counter() - started
    print(f"{label:<48} {elapsed:7.3f} s  { ({k: answer[k] for k in keys}) }")


def main() -> None:
    text_keys = ("lines_added", "lines_removed", "approximate", "truncated")
    for count in (1_000, 20_000):
        old = lines(count)
        new = edited(old, 0.05)
        run(
            f"text: {count} lines, 5 % changed",
            lambda o=old, n=new: dict(diff_text("\n".join(o), "\n".join(n))),
            text_keys,
        )
    repeated_old = "\n".join(["x", "y", "z"] * 700)
    repeated_new = "\n".join(["y", "x"] * 1_000)
    run(
        "text: repeated lines (work bound)",
        lambda: dict(diff_text(repeated_old, repeated_new)),
        text_keys,
    )
    big_old, big_new = "\n".join(lines(200_000)), "\n".join(lines(200_000))
    run("text: two disjoint texts over 2 MB", lambda: dict(diff_text(big_old, big_new)), text_keys)

    cue_keys = ("offset_ms", "shifted", "changed", "added", "removed", "truncated")
    track = [cue(1_000 * n, 1_000 * n + 800, f"cue {n} " + "w" * (n % 50)) for n in range(1_000)]
    shifted = [cue(c["start_ms"] + 700, c["end_ms"] + 700, c["text"]) for c in track]
    for n in random.sample(range(len(shifted)), 50):
        shifted[n] = cue(shifted[n]["start_ms"], shifted[n]["end_ms"], f"edited {n}")
    run(
        "cues: 1 000, shifted 700 ms, 50 reworded",
        lambda: dict(match_cues(track, shifted)),
        cue_keys,
    )
    music = [cue(1_000 * n, 1_000 * n + 800, "[Music]") for n in range(5_000)]
    later = [cue(c["start_ms"] + 250, c["end_ms"] + 250, c["text"]) for c in music]
    run("cues: 5 000 '[Music]', shifted", lambda: dict(match_cues(music, later)), cue_keys)
    together = [cue(0, 1_000, f"x{n}") for n in range(5_000)]
    reworded = [cue(0, 1_000, f"y{n}") for n in range(5_000)]
    run(
        "cues: 5 000 at one timing, reworded",
        lambda: dict(match_cues(together, reworded)),
        cue_keys,
    )


if __name__ == "__main__":
    main()
