"""Header values through the API: malformed or huge numbers are ignored or a 400, never a 500."""

from __future__ import annotations

import asyncio
import uuid

import httpx
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


@pytest.mark.parametrize("wait", ["²", "¹", "³", "٣"])
def test_prefer_wait_malformed_is_no_preference(api: Api, workspace: uuid.UUID, wait: str) -> None:
    """A retrieval that exists, so the preference is read: a wait that is not ASCII digits is
    no preference (answered at once, none applied), never a 500."""
    created = api.client.post(
        "/research-api/evidence/retrieve",
        json=body("https://example.org/", workspace),
        headers=api.headers,
    )
    assert created.status_code == 202, created.text
    retrieval_id = created.json()["retrieval"]["id"]
    response = asyncio.run(raw_get(f"/research-api/evidence/retrievals/{retrieval_id}", api, wait))
    assert response.status_code == 200, response.text
    assert "Preference-Applied" not in response.headers


async def raw_get(path: str, api: Api, wait: str) -> httpx.Response:
    """GET with `Prefer: wait=<wait>` as the Latin-1 bytes a server receives. The test client
    re-encodes header text as UTF-8 (b"\xb2" would arrive as "Â²"); the ASGI transport hands
    the app the raw bytes, as uvicorn does."""
    from api.http.app import app

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        return await client.get(path, headers={**api.headers, "Prefer": wire(f"wait={wait}")})


@pytest.mark.parametrize("wait", ["²", "¹", "³", "٣", HUGE, "0" * 5000 + "1"])
def test_prefer_wait_on_an_unknown_id_is_404(api: Api, wait: str) -> None:
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
