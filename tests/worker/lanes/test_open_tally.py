"""How the open tally is split over its shards (`open_tally.share`, `open_tally.split`)."""

from __future__ import annotations

import pytest

from worker.lanes.open_tally import SHARDS, share, split


@pytest.mark.parametrize("ceiling", [0, 1, 3, SHARDS - 1, SHARDS, SHARDS + 1, 10, 997, 10_000])
def test_the_shares_add_up_to_the_ceiling(ceiling: int) -> None:
    parts = [share(s, ceiling) for s in range(SHARDS)]
    assert sum(parts) == ceiling
    assert max(parts) - min(parts) <= 1


def _splits() -> list[tuple[int, int, int]]:
    cases = []
    for ceiling in (1, 2, 3, 7, 8, 9, 10, 64, 1000):
        for counted in range(0, ceiling + 1, max(1, ceiling // 9)):
            for added in range(0, ceiling - counted + 1, max(1, ceiling // 7)):
                cases.append((counted, added, ceiling))
    return cases


@pytest.mark.parametrize(("counted", "added", "ceiling"), _splits())
def test_a_split_keeps_the_counts_and_each_shard_within_its_share(
    counted: int, added: int, ceiling: int
) -> None:
    rows = split(counted, added, ceiling)
    assert len(rows) == SHARDS
    assert sum(c for c, _ in rows) == counted and sum(a for _, a in rows) == added
    rooms = [share(s, ceiling) - c - a for s, (c, a) in enumerate(rows)]
    assert min(rooms) >= 0 and all(c >= 0 and a >= 0 for c, a in rows)
    assert sum(rooms) == ceiling - counted - added


def test_the_room_left_is_spread_over_the_shards() -> None:
    rooms = [share(s, 10_000) - c - a for s, (c, a) in enumerate(split(6_000, 1, 10_000))]
    assert sum(rooms) == 3_999
    assert max(rooms) - min(rooms) <= 2  # not all in a few shards: each takes a share
