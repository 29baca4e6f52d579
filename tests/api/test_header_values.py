"""Header values through the API: malformed or huge numbers are ignored or a 400, never a 500."""

from __future__ import annotations

import uuid

import pytest

from tests.support.factories import Api, body, check_envelope

HUGE = "9" * 5000


def wire(value: str) -> bytes:
    """`value` as header bytes: Latin-1 when it can be (servers decode headers as Latin-1, so
    b"\xb2" arrives as "²"), else UTF-8."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode()


@pytest.mark.parametrize("wait", ["²", "¹", "³", "٣", HUGE, "0" * 5000 + "1"])
def test_prefer_wait_never_500(api: Api, wait: str) -> None:
    """An unknown id: 404 at once whatever the wait (a malformed one is no preference)."""
    response = api.client.get(
        f"/research-api/evidence/retrievals/{uuid.uuid4()}",
        headers={**api.headers, "Prefer": wire(f"wait={wait}")},
    )
    check_envelope(response, 404, "not_found")


def test_prefer_wait_huge_is_clamped(api: Api) -> None:
    response = api.client.post(
        "/research-api/evidence/retrievals/batch-get",
        json={"ids": [str(uuid.uuid4())]},
        headers={**api.headers, "Prefer": f"wait={HUGE}"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["Preference-Applied"] == "wait=30"
    superscript = api.client.post(
        "/research-api/evidence/retrievals/batch-get",
        json={"ids": [str(uuid.uuid4())]},
        headers={**api.headers, "Prefer": wire("wait=²")},
    )
    assert superscript.status_code == 200 and "Preference-Applied" not in superscript.headers


@pytest.mark.parametrize("value", ["²", "¹", "³", "٣", "-1"])
def test_max_age_malformed_is_400(api: Api, workspace: uuid.UUID, value: str) -> None:
    response = api.client.post(
        "/research-api/evidence/retrieve",
        json=body("https://example.org/", workspace),
        headers={**api.headers, "Cache-Control": wire(f"max-age={value}")},
    )
    assert check_envelope(response, 400, "invalid_input")["field"] == "Cache-Control"


def test_max_age_huge_is_capped(api: Api, workspace: uuid.UUID) -> None:
    response = api.client.post(
        "/research-api/evidence/retrieve",
        json=body("https://example.org/", workspace),
        headers={**api.headers, "Cache-Control": f"max-age={HUGE}"},
    )
    assert response.status_code == 202, response.text
