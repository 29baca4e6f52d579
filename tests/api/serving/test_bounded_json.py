"""The pure parts of bounding work before it is spent: JSON bodies within each route's bounds,
header numbers read strictly, text the database refuses found; and the route table complete."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.services.cache_control import MAX_AGE_CAP_SECONDS, parse_max_age
from api.services.waiters import MAX_WAIT_SECONDS, parse_prefer_wait
from api.serving import bounded_bodies
from api.serving.bounded_bodies import BATCH, BRIEF, ROUTES, api_rule
from api.serving.bounded_json import NOT_JSON, Bounds, Refused, check, field_name, parse
from api.serving.header_values import decimal
from tests.api.serving.test_body_limit import MAX_SAFE_INTEGER, largest_brief
from worker.domain.safe_text import first_refused, storable

TIGHT = Bounds(max_bytes=1000, max_values=10, max_depth=3, max_keys=3, max_string_chars=5)


def refused(data: bytes | str, bounds: Bounds = TIGHT) -> Refused:
    with pytest.raises(Refused) as caught:
        parse(data.encode() if isinstance(data, str) else data, bounds)
    return caught.value


class TestParse:
    def test_within_bounds_is_the_value(self) -> None:
        assert parse(b'{"a": [1, "abcde"], "b": {"c": null}}', TIGHT) == {
            "a": [1, "abcde"],
            "b": {"c": None},
        }

    def test_not_json_is_left_to_the_framework(self) -> None:
        for data in (b"{", b"", b"\xff\xfe\xfa", b"{'a': 1}", b"[1,]"):
            assert parse(data, TIGHT) is NOT_JSON

    def test_bytes_over_the_limit_are_413(self) -> None:
        error = refused(b"[" + b"1," * 600 + b"1]")
        assert error.status == 413

    def test_byte_limit_may_follow_a_setting(self) -> None:
        assert Bounds(max_bytes=lambda: 7, max_values=1).byte_limit() == 7

    def test_too_many_keys_names_the_object(self) -> None:
        error = refused('{"a": {"k1": 1, "k2": 2, "k3": 3, "k4": 4}}')
        assert (error.status, error.field) == (400, "a")
        assert "more than 3 keys" in error.message
        assert refused('{"k1": 1, "k2": 2, "k3": 3, "k4": 4}').field is None

    def test_too_many_values(self) -> None:
        assert "more than 10 values" in refused("[" + ",".join(["1"] * 11) + "]").message
        # Spread over nested containers too, each below its own bound.
        assert "values" in refused("[[1,2,3],[1,2,3],[1,2,3],[1,2]]").message
        parse(b"[1,2,3,4,5,6,7,8,9]", TIGHT)  # the array and nine: ten values

    def test_too_deep_names_where(self) -> None:
        error = refused('{"a": [{"b": [1]}]}')
        assert error.field == "a[0].b"
        assert "deeper than 3 levels" in error.message
        parse(b'{"a": [{"b": 1}]}', TIGHT)

    def test_recursion_bomb_is_refused_not_raised(self) -> None:
        error = refused(b"[" * 100_000 + b"]" * 100_000, Bounds(max_bytes=10**6, max_values=10))
        assert error.status == 400 and "deeper" in error.message

    def test_long_strings_and_keys(self) -> None:
        assert refused('{"a": ["abcdef"]}').field == "a[0]"
        assert refused('{"abcdef": 1}').field is None

    def test_a_huge_integer_is_refused(self) -> None:
        big = Bounds(max_bytes=10**6, max_values=10)
        assert "digits" in refused(b"[" + b"9" * 5000 + b"]", big).message

    @pytest.mark.parametrize("text", ["a\\u0000b", "\\ud800", "x\\udfffy", "\\udc00\\ud800"])
    def test_text_the_database_refuses(self, text: str) -> None:
        error = refused(f'{{"a": {{"b": ["{text}"]}}}}')
        assert error.field == "a.b[0]" and "U+0000" in error.message
        assert refused(f'{{"{text}": 1}}').field is None  # in a key

    def test_paired_surrogates_are_text(self) -> None:
        assert parse(b'["\\ud83d\\ude00"]', TIGHT) == ["\U0001f600"]

    def test_unchecked_top_level_keys_keep_their_text(self) -> None:
        bounds = Bounds(max_bytes=100, max_values=10, text_unchecked=frozenset({"items"}))
        assert parse(b'{"items": ["a\\u0000"]}', bounds) == {"items": ["a\x00"]}
        with pytest.raises(Refused):
            parse(b'{"other": ["a\\u0000"]}', bounds)
        with pytest.raises(Refused):  # only at the top level
            parse(b'{"x": {"items": "a\\u0000"}}', bounds)

    def test_check_stops_at_the_bound_whatever_follows(self) -> None:
        """A container's size is judged before its children are looked at."""
        with pytest.raises(Refused):
            check([0] * 1_000_000, TIGHT)
        with pytest.raises(Refused):
            check({str(i): i for i in range(100_000)}, TIGHT)

    def test_field_name(self) -> None:
        assert field_name(()) is None
        assert field_name(("items", 3, "url")) == "items[3].url"
        assert field_name((0, "a")) == "[0].a"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_parse_is_json_loads_or_refused(value: Any) -> None:
    """Whatever the value: the same value back, or a refusal; never another exception."""
    data = json.dumps(value).encode()
    try:
        assert parse(data, TIGHT) == value
    except Refused as error:
        assert error.status in (400, 413)


class TestRouteBounds:
    def test_every_body_route_has_bounds(self) -> None:
        from fastapi.routing import APIRoute

        from api.http.app import app

        def routes(router: Any, outer: str = "") -> list[tuple[str, Any]]:
            """Every route with the prefix it is served under: a router included by another
            is served under the including router's prefix too."""
            out = []
            for route in router.routes:
                inner = getattr(route, "original_router", None)
                if inner is not None:
                    out += routes(inner, outer + getattr(router, "prefix", ""))
                else:
                    out.append((outer, route))
            return out

        with_body = {
            (method, outer + route.path)
            for outer, route in routes(app.router)
            if isinstance(route, APIRoute) and route.body_field is not None
            for method in route.methods
        }
        assert with_body == set(ROUTES)

    def test_rules_match_paths_with_parameters(self) -> None:
        scope = {"method": "PATCH", "path": f"/research-api/webhooks/{uuid.uuid4()}"}
        rule = api_rule(scope)
        assert rule is not None and rule.template == "/research-api/webhooks/{webhook_id}"
        assert api_rule({"method": "GET", "path": "/research-api/webhooks/x"}) is None
        assert api_rule({"method": "POST", "path": "/research-api/evidence/retrieve/"}) is None

    def test_the_largest_brief_fits(self) -> None:
        body = {
            "workspace_id": str(uuid.uuid4()),
            "id": str(uuid.uuid4()),
            "expected_revision": MAX_SAFE_INTEGER,
            "content": largest_brief(str(uuid.uuid4()), MAX_SAFE_INTEGER),
        }
        data = json.dumps(body).encode()
        assert parse(data, BRIEF) == body

    def test_the_largest_batch_fits(self) -> None:
        body = {"items": [largest_retrieve_body()] * 1000}
        assert parse(json.dumps(body).encode(), BATCH) == body

    def test_small_routes_fit_their_bodies(self) -> None:
        parse(json.dumps(largest_retrieve_body()).encode(), bounded_bodies.SMALL)
        # json.dumps escapes each astral character as a 12-byte surrogate pair: the worst case.
        search = {"workspace_id": str(uuid.uuid4()), "query": "😀" * 1000, "limit": 50}
        parse(json.dumps(search).encode(), bounded_bodies.SMALL)

    def test_the_largest_webhook_body_fits(self) -> None:
        """Every string at its schema's limit, each character escaped at its longest."""
        from api.webhook_schemas import MAX_DESCRIPTION_CHARS, MAX_WEBHOOK_URL_CHARS

        events = ["retrieval.settled"] * 8
        body = {
            "workspace_id": str(uuid.uuid4()),
            "url": "https://example.org/" + "😀" * (MAX_WEBHOOK_URL_CHARS - 20),
            "events": events,
            "description": "😀" * MAX_DESCRIPTION_CHARS,
        }
        for route in (
            ("POST", f"{bounded_bodies.API}/webhooks"),
            (
                "PATCH",
                f"{bounded_bodies.API}/webhooks/{{webhook_id}}",
            ),
        ):
            parse(json.dumps(body).encode(), bounded_bodies.ROUTES[route])


def largest_retrieve_body() -> dict[str, str]:
    """A retrieve body with every field at its schema's limit (a URL of 2 048 characters)."""
    return {
        "url": "https://example.org/" + "a" * 2028,
        "kind": "published_captions",
        "language": "a" * 35,
        "workspace_id": str(uuid.uuid4()),
        "mutation_id": str(uuid.uuid4()),
    }


class TestDecimal:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("0", 0),
            ("7", 7),
            ("030", 30),
            ("31", 30),
            ("0" * 5000 + "5", 5),
            ("9" * 5000, 30),
            ("1" + "0" * 10, 30),
        ],
    )
    def test_ascii_digits(self, text: str, expected: int) -> None:
        assert decimal(text, 30) == expected

    @pytest.mark.parametrize(
        "text", ["", "²", "¹", "³", "1²", "٣", "１", "-1", "+1", " 1", "1.0", "1e3", "0x1", "١٢"]
    )
    def test_anything_else_is_none(self, text: str) -> None:
        assert decimal(text, 30) is None

    @given(st.text(max_size=12))
    def test_never_raises(self, text: str) -> None:
        value = decimal(text, 10**6)
        expected = int(text) if text.isascii() and text.isdigit() else None
        assert value == (None if expected is None else min(expected, 10**6))


class TestHeaders:
    @pytest.mark.parametrize("bad", ["²", "¹", "³", "٣", "1²", "-1", "", "x"])
    def test_prefer_wait_malformed_is_no_preference(self, bad: str) -> None:
        assert parse_prefer_wait([f"wait={bad}"]) is None

    def test_prefer_wait_long_values_are_clamped(self) -> None:
        assert parse_prefer_wait(["wait=" + "9" * 5000]) == MAX_WAIT_SECONDS
        assert parse_prefer_wait(["wait=" + "0" * 5000 + "3"]) == 3
        assert parse_prefer_wait(['respond-async, wait="12"']) == 12

    @pytest.mark.parametrize("bad", ["²", "¹", "³", "٣", "1²", "-1", "", "x", "1.5"])
    def test_max_age_malformed_is_400(self, bad: str) -> None:
        from api.errors import ApiError

        with pytest.raises(ApiError) as caught:
            parse_max_age([f"max-age={bad}"])
        assert (caught.value.status, caught.value.field) == (400, "Cache-Control")

    def test_max_age_long_values_are_capped(self) -> None:
        assert parse_max_age(["max-age=" + "9" * 5000]) == MAX_AGE_CAP_SECONDS
        assert parse_max_age(["max-age=" + "0" * 5000 + "60"]) == 60
        assert parse_max_age(['no-cache, max-age="5"']) == 5

    def test_content_length(self) -> None:
        from api.serving.body_limit import declared_length

        def of(value: bytes) -> int | None:
            return declared_length({"type": "http", "headers": [(b"content-length", value)]})

        assert of("²".encode()) is None
        assert of(b"9" * 5000) is not None and of(b"9" * 5000) > 10**12  # type: ignore[operator]
        assert of(b" 12 ") == 12


class TestSafeText:
    @pytest.mark.parametrize(
        ("text", "index"),
        [("", None), ("abc", None), ("a\x00", 1), ("é\x00", 1), ("é\ud800", 1), ("\udfff", 0)],
    )
    def test_first_refused(self, text: str, index: int | None) -> None:
        assert first_refused(text) == index

    def test_storable_replaces_only_what_is_refused(self) -> None:
        assert storable("\x00boom\x00") == "\ufffdboom\ufffd"
        assert storable("é\ud800😀") == "é\ufffd😀"
        text = "plain text"
        assert storable(text) is text

    @given(st.text())
    def test_storable_is_always_utf8(self, text: str) -> None:
        out = storable(text)
        out.encode("utf-8")
        assert "\x00" not in out and len(out) == len(text)
