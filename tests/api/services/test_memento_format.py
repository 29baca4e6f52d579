"""Memento's pure pieces: HTTP dates read strictly, the closest memento (against a brute-force
reference over every small case), and link-format written then read back."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.services import memento_format as fmt

T0 = datetime(2026, 6, 1, 9, 0, 0, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def reference(mementos: list[fmt.Memento], moment: datetime) -> int:
    """The rule, stated plainly: least distance; then earlier; then the last in order."""

    def key(index: int) -> tuple[timedelta, datetime, int]:
        distance = abs(mementos[index].datetime - moment)
        return (distance, mementos[index].datetime, -index)

    return min(range(len(mementos)), key=key)


class TestHttpDates:
    def test_round_trip(self) -> None:
        assert fmt.http_date(T0) == "Mon, 01 Jun 2026 09:00:00 GMT"
        assert fmt.parse_http_date("Mon, 01 Jun 2026 09:00:00 GMT") == T0

    def test_naive_is_utc_and_offsets_are_converted(self) -> None:
        assert fmt.http_date(T0.replace(tzinfo=None)) == fmt.http_date(T0)
        two_hours_east = T0.astimezone(timezone(timedelta(hours=2)))
        assert fmt.http_date(two_hours_east) == "Mon, 01 Jun 2026 09:00:00 GMT"

    @pytest.mark.parametrize(
        "text",
        [
            "",
            "yesterday",
            "Tue, 01 Jun 2026 09:00:00 GMT",  # 1 June 2026 is a Monday
            "Mon, 1 Jun 2026 09:00:00 GMT",  # one-digit day
            "Mon, 01 Jun 2026 09:00:00 UTC",
            "Mon, 01 Jun 2026 09:00:00 +0000",
            "Mon, 01 Jun 2026 09:00 GMT",
            "Monday, 01-Jun-26 09:00:00 GMT",  # RFC 850
            "Mon Jun  1 09:00:00 2026",  # asctime
            "2026-06-01T09:00:00Z",
            "mon, 01 jun 2026 09:00:00 gmt",
            "Mon, 31 Jun 2026 09:00:00 GMT",
            "Mon, 01 Jun 2026 24:00:00 GMT",
            " Mon, 01 Jun 2026 09:00:00 GMT",
            "Mon, 01 Jun 2026 09:00:00 GMT\x00",
        ],
    )
    def test_anything_else_is_refused(self, text: str) -> None:
        with pytest.raises(fmt.BadHttpDate):
            fmt.parse_http_date(text)

    @given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)))
    def test_every_second_round_trips(self, moment: datetime) -> None:
        whole = fmt.memento_time(moment)
        assert whole.microsecond == 0 and whole.tzinfo == UTC
        assert fmt.parse_http_date(fmt.http_date(whole)) == whole

    def test_memento_time_cuts_to_the_second(self) -> None:
        assert fmt.memento_time(T0 + timedelta(microseconds=999_999)) == T0


def mementos_at(seconds: tuple[int, ...]) -> list[fmt.Memento]:
    return [fmt.Memento(f"m{n}", at(s)) for n, s in enumerate(sorted(seconds))]


class TestClosest:
    def test_none_is_an_error(self) -> None:
        with pytest.raises(ValueError, match="no mementos"):
            fmt.closest([], T0)

    def test_named_cases(self) -> None:
        ms = mementos_at((10, 20, 20, 40))
        assert fmt.closest(ms, at(-1000)) == 0  # before the first
        assert fmt.closest(ms, at(10)) == 0  # exactly
        assert fmt.closest(ms, at(15)) == 0  # equally far: the one before
        assert fmt.closest(ms, at(16)) == 2  # two at 20: the last recorded
        assert fmt.closest(ms, at(20)) == 2
        assert fmt.closest(ms, at(30)) == 2  # equally far from 20 and 40: before
        assert fmt.closest(ms, at(31)) == 3
        assert fmt.closest(ms, at(10**6)) == 3  # after the last

    def test_ties_at_the_first_datetime(self) -> None:
        ms = mementos_at((5, 5, 5))
        assert [fmt.closest(ms, at(s)) for s in (0, 5, 9)] == [2, 2, 2]

    def test_every_small_case_matches_the_reference(self) -> None:
        """Every multiset of up to 4 datetimes in 0..6 s, asked at every second -1..7."""
        cases = 0
        for size in range(1, 5):
            for seconds in itertools.combinations_with_replacement(range(7), size):
                ms = mementos_at(seconds)
                for s in range(-1, 8):
                    assert fmt.closest(ms, at(s)) == reference(ms, at(s)), (seconds, s)
                    cases += 1
        assert cases > 2_000

    @given(
        st.lists(st.integers(-(10**9), 10**9), min_size=1, max_size=40),
        st.integers(-(2 * 10**9), 2 * 10**9),
    )
    def test_large_cases_match_the_reference(self, seconds: list[int], moment: int) -> None:
        ms = mementos_at(tuple(seconds))
        assert fmt.closest(ms, at(moment)) == reference(ms, at(moment))


ORIGINAL = "https://example.org/lake?x=1&y=2"
GATE = "http://127.0.0.1:8000/research-api/evidence/memento/w/timegate/" + ORIGINAL
MAP = "http://127.0.0.1:8000/research-api/evidence/memento/w/timemap/" + ORIGINAL


class TestLinkFormat:
    def test_timemap_reads_back(self) -> None:
        ms = [fmt.Memento(f"http://h/e/{n}?revision={n}", at(60 * n)) for n in range(3)]
        text = fmt.timemap(ORIGINAL, GATE, MAP, ms)
        links = fmt.parse_links(text)
        assert [(link.target, link.rels) for link in links] == [
            (ORIGINAL, {"original"}),
            (GATE, {"timegate"}),
            (MAP, {"self"}),
            (ms[0].uri, {"first", "memento"}),
            (ms[1].uri, {"memento"}),
            (ms[2].uri, {"last", "memento"}),
        ]
        assert links[2].params == {
            "rel": "self",
            "type": "application/link-format",
            "from": "Mon, 01 Jun 2026 09:00:00 GMT",
            "until": "Mon, 01 Jun 2026 09:02:00 GMT",
        }
        assert [fmt.parse_http_date(link.params["datetime"]) for link in links[3:]] == [
            m.datetime for m in ms
        ]

    def test_one_memento_is_first_and_last(self) -> None:
        links = fmt.parse_links(fmt.timemap(ORIGINAL, GATE, MAP, [fmt.Memento("u", T0)]))
        assert links[3].rels == {"first", "last", "memento"}

    def test_unsafe_characters_are_escaped(self) -> None:
        """A stored key from before URLs were checked cannot break out of its brackets."""
        odd = 'https://example.org/a b<c>"d"/é'
        (parsed,) = fmt.parse_links(fmt.link(odd, "original"))
        assert parsed.target == "https://example.org/a%20b%3Cc%3E%22d%22/%C3%A9"

    @given(
        st.lists(
            st.tuples(
                st.text(min_size=1, max_size=30),
                st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)),
            ),
            min_size=1,
            max_size=8,
        )
    )
    def test_any_targets_round_trip(self, items: list[tuple[str, datetime]]) -> None:
        ms = sorted(
            (fmt.Memento(text, fmt.memento_time(moment)) for text, moment in items),
            key=lambda m: m.datetime,
        )
        links = fmt.parse_links(fmt.timemap(ORIGINAL, GATE, MAP, ms))
        assert [link.target for link in links[3:]] == [fmt.uri(m.uri) for m in ms]
        assert [fmt.parse_http_date(link.params["datetime"]) for link in links[3:]] == [
            m.datetime for m in ms
        ]

    @pytest.mark.parametrize(
        "text",
        ["", "https://x", "<https://x>; rel=original", "<https://x> <https://y>", '<a>; rel="x",'],
    )
    def test_malformed_links_are_refused(self, text: str) -> None:
        with pytest.raises(ValueError):
            fmt.parse_links(text)
