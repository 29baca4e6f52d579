"""Whatever URL the door (`api.schemas.Url`) accepts, every later step reads without failing.

The door, the fetch guard and the evidence key share one parser (`worker.domain.urls`), so a URL
that passes the door can never make the guard say it does not parse, nor the key raise.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from api.schemas import Url
from worker.fetch.guard import ParsedTarget, Verdict, check_url
from worker.store.evidence import normalise_url

DOOR: TypeAdapter[str] = TypeAdapter(Url)
EXAMPLES = settings(max_examples=600, deadline=None, derandomize=True)

#: RFC 3986 characters (what the door's first check lets through), weighted toward the ones
#: that split an authority.
_URI_CHARS = st.sampled_from(list("abcxyz019.-_~%:/?#[]@!$&'()*+,;=") + ["%31", "%2e", "0x"])
_AUTHORITY = st.lists(_URI_CHARS, max_size=24).map("".join)
_SCHEME = st.sampled_from(["https", "http", "HTTPS", "ftp", "foo", "file", "mailto"])
_SEPARATOR = st.sampled_from(["://", ":", ":/", ":///", "://[", "://::"])


def accepted(url: str) -> bool:
    try:
        DOOR.validate_python(url)
    except ValidationError:
        return False
    return True


@EXAMPLES
@given(_SCHEME, _SEPARATOR, _AUTHORITY, st.sampled_from(["", "/", "/a?b#c", ":443/", ":8443"]))
def test_what_the_door_accepts_every_step_reads(
    scheme: str, separator: str, authority: str, tail: str
) -> None:
    """No exception from the key or the guard; the guard never says "does not parse"."""
    url = f"{scheme}{separator}{authority}{tail}"
    assume(accepted(url))
    assert isinstance(normalise_url(url), str)
    verdict = check_url(url, [443, 8443])
    assert isinstance(verdict, ParsedTarget | Verdict)
    if isinstance(verdict, Verdict):
        assert not verdict.reason.startswith("URL does not parse"), (url, verdict)


@pytest.mark.parametrize(
    "url",
    [
        "https://::1/",
        "https://93.184.215.14:443:22/",
        "https://93.184.215.14:99999/",
        "https://127.0.0.1:+443/",
        "https://93.184.215.14:443abc/",
        "https://",
    ],
)
def test_the_issue_urls_are_refused(url: str) -> None:
    assert not accepted(url)
