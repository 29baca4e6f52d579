"""What a WACZ export holds (`worker.archive.selection`): plain functions, checked against
brute-force rules over generated rows and id lists, malformed items included."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.archive import selection
from worker.store.archive_reads import IndexedExchange

T0 = datetime(2026, 6, 1, tzinfo=UTC)
WORKSPACE = uuid.UUID(int=1)


def exchange(
    n: int,
    record_type: str = "response",
    refers_to: str | None = None,
    file: str = "f1",
    offset: int | None = None,
    group_bytes: int = 100,
) -> IndexedExchange:
    return IndexedExchange(
        record_id=f"<urn:uuid:{uuid.UUID(int=n)}>",
        record_type=record_type,
        workspace_id=WORKSPACE,
        evidence_id=uuid.UUID(int=1000 + n),
        revision=1,
        url=f"https://example.org/{n}",
        fetched_at=T0 + timedelta(seconds=n),
        payload_digest=f"sha256:{n}",
        refers_to=refers_to,
        file=file,
        offset=n * 1000 if offset is None else offset,
        length=50,
        group_bytes=group_bytes,
    )


def rid(n: int) -> str:
    return f"<urn:uuid:{uuid.UUID(int=n)}>"


class TestParseEvidenceIds:
    def test_each_malformed_item_is_named(self) -> None:
        good = str(uuid.uuid4())
        other = str(uuid.uuid4())
        values: list[Any] = [
            good,
            "nope",
            7,
            None,
            good.upper(),  # the same id in another case: a duplicate
            "{" + other + "}",
            other.replace("-", ""),
            f"urn:uuid:{other}",
            other,
            ["x"],
            " " + other,
            "x" * 200,
        ]
        ids, bad = selection.parse_evidence_ids(values)
        assert ids == [uuid.UUID(good), uuid.UUID(other)]
        assert [(b.index, b.reason) for b in bad] == [
            (1, "not_a_uuid"),
            (2, "not_a_uuid"),
            (3, "not_a_uuid"),
            (4, "duplicate"),
            (5, "not_a_uuid"),
            (6, "not_a_uuid"),
            (7, "not_a_uuid"),
            (9, "not_a_uuid"),
            (10, "not_a_uuid"),
            (11, "not_a_uuid"),
        ]
        assert bad[1].value == "7" and bad[2].value == "None"
        assert len(bad[-1].value) == 64  # echoed cut short
        assert bad[0].as_dict() == {"index": 1, "value": "nope", "reason": "not_a_uuid"}

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(
            st.one_of(
                st.sampled_from([str(uuid.UUID(int=i)) for i in range(4)]),
                st.sampled_from([str(uuid.UUID(int=i)).upper() for i in range(4)]),
                st.text(max_size=40),
                st.integers(),
                st.none(),
            ),
            max_size=12,
        )
    )
    def test_against_a_brute_force_rule(self, values: list[Any]) -> None:
        """Every item is an id or refused, never both; ids keep their first order; nothing is
        dropped silently."""
        ids, bad = selection.parse_evidence_ids(values)
        expected_ids: list[uuid.UUID] = []
        expected_bad = []
        for index, value in enumerate(values):
            canonical = isinstance(value, str) and any(
                value.lower() == str(uuid.UUID(int=i)) for i in range(4)
            )
            if not canonical:
                # A generated text could still be a canonical UUID of another value.
                try:
                    canonical = isinstance(value, str) and str(uuid.UUID(value)) == value.lower()
                except ValueError:
                    canonical = False
            if not canonical:
                expected_bad.append((index, "not_a_uuid"))
            elif uuid.UUID(value) in expected_ids:
                expected_bad.append((index, "duplicate"))
            else:
                expected_ids.append(uuid.UUID(value))
        assert ids == expected_ids
        assert [(b.index, b.reason) for b in bad] == expected_bad
        assert len(ids) + len(bad) == len(values)


def test_not_found_names_every_unknown_item() -> None:
    known = {uuid.UUID(int=1), uuid.UUID(int=2)}
    values: list[object] = [str(uuid.UUID(int=1)), str(uuid.UUID(int=3)), "bad", 4]
    values.append(str(uuid.UUID(int=5)).upper())
    missing = selection.not_found(values, known)
    assert [(m.index, m.reason) for m in missing] == [(1, "not_found"), (4, "not_found")]
    assert selection.not_found([str(uuid.UUID(int=2))], known) == []


class TestWithReferred:
    def test_revisits_bring_the_response_they_refer_to(self) -> None:
        response = exchange(1)
        revisit = exchange(2, "revisit", refers_to=rid(1))
        chosen = selection.with_referred([revisit], {rid(1): response})
        assert chosen == [response, revisit]  # written order: file, then offset

    def test_each_group_once_in_written_order(self) -> None:
        a = exchange(3, file="f2", offset=0)
        b = exchange(1, file="f1", offset=500)
        c = exchange(2, "revisit", refers_to=rid(1), file="f1", offset=900)
        d = exchange(4, "revisit", refers_to=rid(1), file="f3", offset=0)
        chosen = selection.with_referred([d, c, a, b, c], {rid(1): b})
        assert chosen == [b, c, a, d]
        assert selection.referred([b, c, d]) == set()  # its response is chosen already
        assert selection.referred([c, d]) == {rid(1)}

    def test_a_purged_response_leaves_its_revisit(self) -> None:
        revisit = exchange(2, "revisit", refers_to=rid(1))
        assert selection.with_referred([revisit], {}) == [revisit]

    def test_a_not_modified_row_refers_to_nothing(self) -> None:
        bare = exchange(5, "not_modified")
        assert selection.referred([bare]) == set()
        assert selection.with_referred([bare], {}) == [bare]


def test_pages_are_the_payloads_by_time() -> None:
    rows = [
        exchange(3),
        exchange(1),
        exchange(2, "revisit", refers_to=rid(1)),
        exchange(4, "not_modified"),
    ]
    pages = selection.pages(rows)
    assert [(p.url, p.ts) for p in pages] == [
        ("https://example.org/1", T0 + timedelta(seconds=1)),
        ("https://example.org/3", T0 + timedelta(seconds=3)),
    ]
    assert pages[0].id == uuid.UUID(int=1).hex


def test_size_and_limit() -> None:
    rows = [exchange(1, group_bytes=300), exchange(2, group_bytes=212)]
    assert selection.export_bytes(rows) == 512
    assert selection.export_bytes([]) == 0
    assert not selection.over_limit(512, 512)
    assert selection.over_limit(513, 512)
