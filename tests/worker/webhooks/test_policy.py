"""Which endpoint URLs webhook registration accepts (pure: no resolution, no sockets)."""

from __future__ import annotations

from ipaddress import ip_network

import pytest

from worker.webhooks.policy import endpoint_refusal

PORTS = [443]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        # Loopback spelled so that only a browser's reading (WHATWG, IDNA) sees the address.
        ("https://１２７.０.０.２/", "127.0.0.2 is loopback (127.0.0.0/8)"),
        ("https://127。0。0。2/", "127.0.0.2 is loopback (127.0.0.0/8)"),
        ("https://127．0．0．2/", "127.0.0.2 is loopback (127.0.0.0/8)"),
        ("https://0x7f.2/", "127.0.0.2 is loopback (127.0.0.0/8)"),
        ("https://%31%32%37.0.0.2/", "127.0.0.2 is loopback (127.0.0.0/8)"),
        ("https://[::ffff:127.0.0.2]/", "::ffff:7f00:2 is IPv4-mapped (::ffff:0:0/96)"),
        # Names that never lead to a public receiver, however they are cased or dotted.
        ("https://localhost/", "localhost is not a public host name"),
        ("https://LOCALHOST./", "localhost is not a public host name"),
        ("https://ｌｏｃａｌｈｏｓｔ/", "localhost is not a public host name"),
        ("https://hooks.localhost/x", "hooks.localhost is not a public host name"),
        ("https://printer.local/", "printer.local is not a public host name"),
        ("https://db.internal/", "db.internal is not a public host name"),
        ("https://nas.home.arpa/", "nas.home.arpa is not a public host name"),
        ("https://box.localdomain/", "box.localdomain is not a public host name"),
        ("https://hooks.test/", "hooks.test is not a public host name"),
        ("https://intranet/", "single-label host names are not public"),
        # The rest of the guard's static rules, with the fault named.
        ("https://", "URL does not parse: no host"),
        ("http://hooks.example.org/", "scheme not allowed: 'http'"),
        ("https://u:p@hooks.example.org/", "userinfo in URL is not allowed"),
        ("https://hooks.example.org:8443/", "port not allowed: 8443"),
    ],
)
def test_refused(url: str, reason: str) -> None:
    assert endpoint_refusal(url, PORTS) == reason


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.org/evidence",
        "https://HOOKS.Example.ORG./evidence",
        "https://local.example.org/",  # a public name that merely contains a reserved label
        "https://localhost.example.org/",
        "https://bücher.de/hook",
        "https://93.184.215.14/hook",
    ],
)
def test_accepted(url: str) -> None:
    assert endpoint_refusal(url, PORTS) is None


def test_allow_list_exempts_addresses_not_names() -> None:
    """Tests and demos allow-list 127.0.0.1: its neighbours and `localhost` stay refused."""
    allow = [ip_network("127.0.0.1/32")]
    assert endpoint_refusal("https://127.0.0.1/", PORTS, allow) is None
    assert endpoint_refusal("https://１２７.０.０.２/", PORTS, allow) is not None
    assert endpoint_refusal("https://localhost/", PORTS, allow) is not None
