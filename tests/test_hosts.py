"""voxwire.hosts: the plaintext ws:// host rule (spec/brisvox.yaml transport.plaintext_hosts).

One table of URLs with their verdict: accepted as private, accepted with the single-label warning,
refused as a public host (accepted with allow_insecure), or refused as malformed (whatever
allow_insecure says). Every ws:// row is replayed over wss://.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import pickle
import re
import socket
import string
from collections.abc import Callable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from voxwire import hosts
from voxwire.brisvox.constants import (
    PLAINTEXT_HOST_NAMES,
    PLAINTEXT_IPV4,
    PLAINTEXT_IPV6,
    PLAINTEXT_IPV6_ZONE,
    PLAINTEXT_SINGLE_LABEL,
    PLAINTEXT_SUFFIXES,
)
from voxwire.hosts import CheckedURL, InsecureURLError, check_url, redact_url

PUBLIC = "plaintext ws:// to a public host"
AMBIGUOUS = "ambiguous numeric host"


def single_label_warning(name: str) -> str:
    return (
        f"single-label host {name!r} may resolve through the search list to a public name; "
        f"prefer {name}.internal or {name}.local"
    )


class Case(NamedTuple):
    url: str
    verdict: str  # "private", "warn", "public", "bad"
    detail: str  # the host when accepted, else a fragment of the message
    port: int = 80


def private(url: str, host: str, port: int = 80) -> Case:
    return Case(url, "private", host, port)


def warn(url: str, host: str, port: int = 80) -> Case:
    return Case(url, "warn", host, port)


def public(url: str, fragment: str = PUBLIC) -> Case:
    return Case(url, "public", fragment)


def bad(url: str, fragment: str) -> Case:
    return Case(url, "bad", fragment)


TABLE = [
    # IPv4 literals in the listed networks, at their edges.
    private("ws://127.0.0.1", "127.0.0.1"),
    private("ws://127.255.255.254:9000", "127.255.255.254", 9000),
    private("ws://10.0.0.1:8765/path?token=secret", "10.0.0.1", 8765),
    private("ws://10.255.255.255/", "10.255.255.255"),
    private("ws://172.16.0.1", "172.16.0.1"),
    private("ws://172.31.255.255", "172.31.255.255"),
    private("ws://192.168.1.20:8080/agent", "192.168.1.20", 8080),
    private("ws://169.254.10.10", "169.254.10.10"),
    private("WS://10.0.0.1", "10.0.0.1"),  # the scheme is case-insensitive
    # IPv4 outside them; is_private would call 0.0.0.0, 100.64/10 and 198.18/15 private.
    public("ws://8.8.8.8", f"{PUBLIC} 8.8.8.8: use wss://, or allow_insecure"),
    public("ws://0.0.0.0"),
    public("ws://100.64.0.1"),
    public("ws://198.18.0.1"),
    public("ws://172.32.0.1"),
    public("ws://172.15.255.255"),
    public("ws://192.169.0.1"),
    public("ws://11.0.0.1"),
    public("ws://169.255.0.1"),
    public("ws://224.0.0.1"),
    public("ws://255.255.255.255"),
    # Numbers a WHATWG URL parser (and inet_aton) reads as IPv4: only a dotted quad is accepted.
    bad("ws://2130706433", f"{AMBIGUOUS} '2130706433'"),
    bad("ws://0x7f.1", f"{AMBIGUOUS} '0x7f.1'"),
    bad("ws://0X7F.0.0.1", f"{AMBIGUOUS} '0x7f.0.0.1'"),
    bad("ws://0x7f000001", AMBIGUOUS),
    bad("ws://010.0.0.1", f"{AMBIGUOUS} '010.0.0.1'"),  # octal: 8.0.0.1
    bad("ws://0127.0.0.1", AMBIGUOUS),
    bad("ws://127.000.000.001", AMBIGUOUS),
    bad("ws://127.1", f"{AMBIGUOUS} '127.1'"),
    bad("ws://127.0.1", AMBIGUOUS),
    bad("ws://1234", f"{AMBIGUOUS} '1234'"),  # 0.0.4.210
    bad("ws://0x", AMBIGUOUS),
    bad("ws://256.0.0.1", AMBIGUOUS),
    bad("ws://1.2.3.4.5", AMBIGUOUS),
    bad("ws://10.0.0.0x1", AMBIGUOUS),
    bad("ws://agent.123", AMBIGUOUS),  # a WHATWG parser refuses it: its last label is numeric
    bad("ws://127.0.0.1.", f"{AMBIGUOUS} '127.0.0.1.'"),  # not a dotted quad for inet_aton
    # IPv6 literals.
    private("ws://[::1]", "::1"),
    private("ws://[::1]:8765/x", "::1", 8765),
    private("ws://[0:0:0:0:0:0:0:1]", "0:0:0:0:0:0:0:1"),
    private("ws://[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),
    private("ws://[::ffff:7f00:1]", "::ffff:7f00:1"),
    private("ws://[::FFFF:192.168.0.1]", "::ffff:192.168.0.1"),
    private("ws://[::ffff:10.1.2.3]:9000", "::ffff:10.1.2.3", 9000),
    private("ws://[fd00::1]", "fd00::1"),
    private("ws://[FD12:3456::ABCD]", "fd12:3456::abcd"),
    private("ws://[fc00::1]", "fc00::1"),
    private("ws://[fe80::1]", "fe80::1"),
    private("ws://[febf:ffff::1]", "febf:ffff::1"),
    private("ws://[fe80::1%25eth0]", "fe80::1%eth0"),
    private("ws://[FE80::A%25Eth0]:8080/p", "fe80::a%Eth0", 8080),  # the zone keeps its case
    public("ws://[::]"),
    public("ws://[::2]"),
    public("ws://[2001:db8::1]", f"{PUBLIC} 2001:db8::1: use wss://"),
    public("ws://[fec0::1]"),  # site-local
    public("ws://[fe00::1]"),
    public("ws://[64:ff9b::7f00:1]"),  # NAT64 of 127.0.0.1
    public("ws://[::127.0.0.1]"),  # IPv4-compatible
    public("ws://[::ffff:8.8.8.8]"),
    public("ws://[::ffff:0.0.0.0]"),
    # A zone counts only on fe80::/10 (decision plaintext-zone-link-local-only).
    public("ws://[fd00::1%25eth0]", f"{PUBLIC} fd00::1%eth0 (a zone id counts only on fe80::/10)"),
    public("ws://[2001:db8::1%25eth0]", f"{PUBLIC} 2001:db8::1%eth0 (a zone id counts only"),
    public("ws://[::1%25lo]", "a zone id counts only on fe80::/10"),
    public("ws://[::ffff:127.0.0.1%25eth0]", "a zone id counts only on fe80::/10"),
    bad("ws://[fe80::1%eth0]", "a zone id must be written %25"),
    bad("ws://[fe80::1%25]", "zone id '' is empty"),
    bad("ws://[fe80::1%25eth%30]", "percent-encoded character in the zone id"),
    bad("ws://[fe80::1%25eth/0]", "has no ]"),
    bad("ws://[fe80::1%25eth!0]", "zone id 'eth!0'"),
    bad("ws://[v1.abc]", "[v1.abc] is not an IPv6 address"),
    bad("ws://[127.0.0.1]", "is not an IPv6 address"),
    bad("ws://[12345::1]", "is not an IPv6 address"),
    bad("ws://[]", "no host"),
    bad("ws://[::1]x", "text after the ]"),
    bad("ws://[::1].", "text after the ]"),
    bad("ws://[::1", "has no ]"),
    bad("ws://::1", "an IPv6 address must be written in brackets, as in [::1]"),
    bad("ws://fe80::1:8765", "must be written in brackets"),
    # Names: localhost and the listed suffixes, case-insensitive, one trailing dot tolerated.
    private("ws://localhost", "localhost"),
    private("ws://LOCALHOST:8765", "localhost", 8765),
    private("ws://localhost.", "localhost"),
    private("ws://foo.localhost", "foo.localhost"),
    private("ws://agent.internal:8765/agent", "agent.internal", 8765),
    private("ws://Agent.Internal", "agent.internal"),
    # decision plaintext-trailing-dot: one trailing dot is removed; agent.internal. is private.
    private("ws://agent.internal.", "agent.internal"),
    private("ws://agent.local", "agent.local"),
    private("ws://AGENT.LOCAL.:9", "agent.local", 9),
    private("ws://agent.default.svc.cluster.local", "agent.default.svc.cluster.local"),
    private("ws://my-agent.internal", "my-agent.internal"),
    private("ws://my_agent.internal", "my_agent.internal"),
    private("ws://10.0.0.1.internal", "10.0.0.1.internal"),
    # Single-label names: accepted with the warning.
    warn("ws://agent", "agent"),
    warn("ws://AGENT", "agent"),
    warn("ws://agent:8765/x?token=secret", "agent", 8765),
    warn("ws://my_agent", "my_agent"),
    warn("ws://internal", "internal"),
    warn("ws://local", "local"),
    warn("ws://db", "db"),  # hex letters, but no 0x: a name, not a number
    warn("ws://1e5", "1e5"),
    # decision plaintext-trailing-dot: "agent." is an absolute single label, a top-level domain:
    # refused as public, not warned (allow_insecure accepts it).
    public("ws://agent.", f"{PUBLIC} agent. (an absolute single label is a top-level domain"),
    public("ws://local."),
    public("ws://example.com"),
    public("ws://evil.com:80/x"),
    public("ws://agent.internal.com"),
    public("ws://agent.internalx"),
    public("ws://localhost.evil.com"),
    public("ws://agent.localdomain"),
    public("ws://10.0.0.1.nip.io"),
    public("ws://evil.com?@10.0.0.1"),  # the query is not the authority
    # Malformed names.
    bad("ws://agent.internal..", "more than one trailing dot in host 'agent.internal..'"),
    bad("ws://agent..", "more than one trailing dot"),
    bad("ws://agent..internal", "empty label in host 'agent..internal'"),
    bad("ws://.internal", "empty label"),
    bad("ws://./", "no host"),
    bad("ws://a!b.internal", "character '!' is not allowed in a host name"),
    bad("ws://a*b", "character '*' is not allowed"),
    bad("ws://xn--bcher-kva.local", "IDNA (xn--) host name 'xn--bcher-kva.local' is refused"),
    bad("ws://agent.XN--BCHER-KVA.internal", "IDNA (xn--)"),
    bad("ws://bücher.local", "non-ASCII character in the host"),
    bad("ws://ａｇｅｎｔ.local", "non-ASCII character in the host"),  # fullwidth, NFKC to agent
    bad("ws://10.0.0.1\u3002evil.com", "non-ASCII character"),  # ideographic full stop
    bad("ws://10%2e0.0.1", "percent-encoded character in the host"),
    bad("ws://%6cocalhost", "percent-encoded character in the host"),
    bad("ws://agent.internal%2f", "percent-encoded character in the host"),
    bad(f"ws://{'a' * 64}.internal", "a label longer than 63"),
    bad(f"ws://{'a.' * 123}internal", "longer than 253"),
    # Scheme and structure.
    bad("http://10.0.0.1", "scheme 'http' is not ws or wss"),
    bad("https://10.0.0.1", "scheme 'https' is not ws or wss"),
    bad("ftp://10.0.0.1", "scheme 'ftp'"),
    bad("localhost:8765", "scheme 'localhost' is not ws or wss"),
    bad("", "no scheme"),
    bad("10.0.0.1:8765", "no scheme"),
    bad("//10.0.0.1", "no scheme"),
    bad("ws:", "no host"),
    bad("ws:10.0.0.1", "no host"),
    bad("ws:/10.0.0.1", "no host"),
    bad("ws://", "no host"),
    bad("ws:///10.0.0.1", "no host"),
    bad("ws://:8765", "no host"),
    bad("ws://?x=1", "no host"),
    bad("ws://user:pass@10.0.0.1/", "credentials (userinfo before @) in the URL are refused"),
    bad("ws://user@10.0.0.1", "credentials"),
    bad("ws://@10.0.0.1", "credentials"),
    bad("ws://:token@localhost", "credentials"),
    bad("ws://10.0.0.1:80@evil.com", "credentials"),
    bad("ws://evil.com\\@10.0.0.1/", "backslash in the URL"),
    bad("ws:\\\\10.0.0.1", "backslash"),
    bad("ws://10.0.0.1\\", "backslash"),
    bad("ws://10.0.0.1/a\\b", "backslash"),
    bad("ws://10.0.0.1/#frag", "fragment (#)"),
    bad("ws://evil.com#@10.0.0.1", "fragment (#)"),
    # Ports.
    private("ws://10.0.0.1:1", "10.0.0.1", 1),
    private("ws://10.0.0.1:65535", "10.0.0.1", 65535),
    private("ws://10.0.0.1:080", "10.0.0.1", 80),  # decimal with a leading zero, never octal
    bad("ws://10.0.0.1:0", "port 0 is not in 1..65535"),
    bad("ws://10.0.0.1:65536", "port 65536 is not in 1..65535"),
    bad("ws://10.0.0.1:99999999999999", "port 9999999999... is not in 1..65535"),
    bad("ws://10.0.0.1:000080", "port 000080 is not in 1..65535"),
    bad("ws://10.0.0.1:", "empty port"),
    bad("ws://10.0.0.1:-1", "port is not a number"),
    bad("ws://10.0.0.1:+80", "port is not a number"),
    bad("ws://10.0.0.1:8o", "port is not a number"),
    bad("ws://10.0.0.1:80:80", "more than one ':' outside brackets"),
    bad("ws://[::1]:", "empty port"),
    bad("ws://[::1]:0", "port 0"),
    # Whitespace and control characters, anywhere (urlsplit silently drops tab and newline).
    bad(" ws://10.0.0.1", "whitespace or control character U+0020 at index 0"),
    bad("ws://10.0.0.1 ", "U+0020 at index 1"),
    bad("ws://10.0.0.1\n", "U+000A"),
    bad("ws://10.0.0.1\t.evil.com", "U+0009"),
    bad("ws://10.0.0.1\x00", "U+0000"),
    bad("ws://10.0.0.1/\x7f", "U+007F"),
    bad("ws://10.0.0.1\u00a0", "U+00A0"),
    bad("ws://10.0.0.1\u2028", "U+2028"),
    bad("ws://10.0.0.1/path with space", "whitespace or control character"),
    bad("ws://10.0.0.1: 80", "whitespace"),
]


def params(keep: Callable[[Case], bool] = lambda case: True) -> list[Any]:
    """The table's rows that ``keep`` keeps, as pytest params named by their URL."""
    return [pytest.param(case, id=repr(case.url)) for case in TABLE if keep(case)]


PARAMS = params()


def test_the_table_covers_every_verdict_and_is_large() -> None:
    verdicts = [case.verdict for case in TABLE]
    assert len(TABLE) >= 70
    assert {v: verdicts.count(v) >= 8 for v in ("private", "warn", "public", "bad")} == {
        "private": True,
        "warn": True,
        "public": True,
        "bad": True,
    }
    assert len({case.url for case in TABLE}) == len(TABLE), "a URL is in the table twice"


@pytest.mark.parametrize("case", PARAMS)
def test_verdict(case: Case) -> None:
    if case.verdict in ("private", "warn"):
        checked = check_url(case.url)
        expected_warning = single_label_warning(case.detail) if case.verdict == "warn" else None
        assert checked == CheckedURL(case.url, "ws", case.detail, case.port, True, expected_warning)
        # allow_insecure changes nothing for a private host.
        assert check_url(case.url, allow_insecure=True) == checked
        return
    with pytest.raises(InsecureURLError) as refused:
        check_url(case.url)
    assert case.detail in str(refused.value)
    assert "\n" not in str(refused.value)
    if case.verdict == "bad":
        with pytest.raises(InsecureURLError) as still:
            check_url(case.url, allow_insecure=True)
        assert case.detail in str(still.value)
        assert PUBLIC not in str(refused.value)
    else:
        assert PUBLIC in str(refused.value)
        allowed = check_url(case.url, allow_insecure=True)
        assert (allowed.scheme, allowed.private) == ("ws", False)
        assert allowed.warning is not None
        assert allowed.warning.startswith(PUBLIC)
        assert allowed.warning.endswith("allowed by allow_insecure: nothing encrypts this link")


def _wss(url: str) -> str:
    return "wss" + url[2:]


@pytest.mark.parametrize("case", params(lambda case: case.url.lower().startswith("ws://")))
def test_wss_goes_to_any_well_formed_host(case: Case) -> None:
    url = _wss(case.url)
    if case.verdict == "bad":
        with pytest.raises(InsecureURLError, match=re.escape(case.detail)):
            check_url(url)
        return
    checked = check_url(url)
    assert checked.scheme == "wss"
    assert checked.private is (case.verdict != "public")
    assert checked.warning is None
    assert checked.port == (urlsplit(url).port or 443)
    if case.verdict != "public":
        assert checked.host == case.detail


def test_wss_with_an_uppercase_scheme() -> None:
    checked = check_url("WSS://8.8.8.8/x")
    assert (checked.scheme, checked.host, checked.port, checked.private) == (
        "wss",
        "8.8.8.8",
        443,
        False,
    )
    assert checked.redacted == "wss://8.8.8.8:443"


EXACT_MESSAGES = [
    (
        "ws://8.8.8.8",
        "ws://8.8.8.8:80: plaintext ws:// to a public host 8.8.8.8: use wss://, or allow_insecure",
    ),
    (
        "ws://user:pass@10.0.0.1/",
        "ws://10.0.0.1:80: credentials (userinfo before @) in the URL are refused",
    ),
    (
        "ws://[2001:db8::1%25eth0]:9000/x?token=secret",
        "ws://[2001:db8::1%25eth0]:9000: plaintext ws:// to a public host 2001:db8::1%eth0 "
        "(a zone id counts only on fe80::/10): use wss://, or allow_insecure",
    ),
    (
        "ws://agent.",
        "ws://agent:80: plaintext ws:// to a public host agent. (an absolute single label is a "
        "top-level domain, not a service name): use wss://, or allow_insecure",
    ),
    (
        "ws://0x7f.1:8765",
        "ws://0x7f.1:8765: ambiguous numeric host '0x7f.1': URL parsers read shorthand, octal and "
        "hex forms as IPv4 addresses; write a dotted quad such as 127.0.0.1",
    ),
    ("http://10.0.0.1/x?token=secret", "http://10.0.0.1:80: scheme 'http' is not ws or wss"),
    ("ws://10.0.0.1:0", "ws://10.0.0.1:0: port 0 is not in 1..65535"),
    (
        "ws://bücher.local",
        "<unparseable URL>: non-ASCII character in the host (IDNA names are refused)",
    ),
    ("ws://a\\@10.0.0.1", "ws://a:80: backslash in the URL (WHATWG URL parsers read it as /)"),
    ("", "<unparseable URL>: no scheme: expected ws:// or wss://"),
]


@pytest.mark.parametrize(("url", "message"), EXACT_MESSAGES)
def test_exact_message(url: str, message: str) -> None:
    with pytest.raises(InsecureURLError) as refused:
        check_url(url)
    assert str(refused.value) == message
    redacted, _, reason = message.partition(": ")
    assert (refused.value.redacted, refused.value.reason) == (redacted, reason)


def test_exact_warnings() -> None:
    assert check_url("ws://agent:8765").warning == (
        "single-label host 'agent' may resolve through the search list to a public name; "
        "prefer agent.internal or agent.local"
    )
    assert check_url("ws://8.8.8.8", allow_insecure=True).warning == (
        "plaintext ws:// to a public host 8.8.8.8 allowed by allow_insecure: nothing encrypts "
        "this link"
    )
    assert check_url("ws://agent.", allow_insecure=True) == CheckedURL(
        "ws://agent.",
        "ws",
        "agent",
        80,
        False,
        "plaintext ws:// to a public host agent. (an absolute single label is a top-level "
        "domain, not a service name) allowed by allow_insecure: nothing encrypts this link",
    )


def test_allow_insecure_on_a_public_host() -> None:
    checked = check_url("ws://203.0.113.7:9000/agent?token=secret", allow_insecure=True)
    assert (checked.scheme, checked.host, checked.port, checked.private) == (
        "ws",
        "203.0.113.7",
        9000,
        False,
    )
    assert checked.redacted == "ws://203.0.113.7:9000"
    assert checked.warning is not None
    assert "secret" not in checked.warning


@pytest.mark.parametrize("case", params(lambda case: case.verdict != "bad"))
def test_redacted_is_redact_url(case: Case) -> None:
    checked = check_url(case.url, allow_insecure=True)
    assert checked.redacted == redact_url(case.url)
    assert checked.redacted.startswith("ws://")
    assert checked.redacted.endswith(f":{checked.port}")


REDACTIONS = [
    ("ws://10.0.0.1:8765/path?token=secret", "ws://10.0.0.1:8765"),
    ("ws://user:secret@10.0.0.1/", "ws://10.0.0.1:80"),
    ("wss://user:secret@agent.example.com/x?token=secret#secret", "wss://agent.example.com:443"),
    ("wss://a@b@Host.Example:9443", "wss://host.example:9443"),
    ("ws://[fe80::1%25eth0]:8080/x?token=secret", "ws://[fe80::1%25eth0]:8080"),
    ("ws://[::1]/", "ws://[::1]:80"),
    ("ws://[FD00::1]", "ws://[fd00::1]:80"),
    ("WS://Agent.Internal./x", "ws://agent.internal:80"),
    ("ws://agent", "ws://agent:80"),
    ("https://user:secret@example.com/x?token=secret", "https://example.com:443"),
    ("http://example.com:8080", "http://example.com:8080"),
    ("ftp://example.com/x", "ftp://example.com"),
    ("ws://0x7f.1/?token=secret", "ws://0x7f.1:80"),
    ("ws://evil.com\\@10.0.0.1/", "ws://evil.com:80"),  # the host a WHATWG parser connects to
    ("ws://10.0.0.1:99999/x", "ws://10.0.0.1:99999"),
    ("", "<unparseable URL>"),
    ("secret", "<unparseable URL>"),
    ("ws:/secret", "<unparseable URL>"),
    ("ws://", "<unparseable URL>"),
    ("ws://user:secret@/x", "<unparseable URL>"),
    ("ws://secret:secret", "<unparseable URL>"),  # a port that is no number is not shown
    ("ws://10.0.0.1:1234567/", "<unparseable URL>"),
    ("ws://[::1", "<unparseable URL>"),
    ("ws://[fe80::1%eth0]", "<unparseable URL>"),
    ("ws://a b/", "<unparseable URL>"),
    ("ws://10.0.0.1\n.evil.com", "<unparseable URL>"),
    ("ws://bücher.local", "<unparseable URL>"),
    ("ws://::1", "<unparseable URL>"),
]


@pytest.mark.parametrize(("url", "redacted"), REDACTIONS)
def test_redact_url(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted


@pytest.mark.parametrize("value", [None, 42, b"ws://10.0.0.1", ["ws://10.0.0.1"]])
def test_not_a_string(value: Any) -> None:
    assert redact_url(value) == "<unparseable URL>"
    with pytest.raises(InsecureURLError, match=r"^<unparseable URL>: not a string$"):
        check_url(value)


SECRET_URLS = [
    "ws://user:hunter2@8.8.8.8/",
    "ws://hunter2@10.0.0.1/",
    "ws://8.8.8.8/hunter2?token=hunter2",
    "ws://8.8.8.8:0/hunter2?token=hunter2",
    "ws://10.0.0.1:8765/path?token=hunter2",
    "ws://10.0.0.1/#hunter2",
    "ws://127.1/?token=hunter2",
    "ws://hunter2:hunter2@bücher.local/",
    "ws://evil.com\\hunter2@10.0.0.1/",
    "http://user:hunter2@10.0.0.1/?token=hunter2",
    "ws://[fd00::1%25eth0]/?token=hunter2",
    "ws://agent/x?token=hunter2 ",
]


@pytest.mark.parametrize("url", SECRET_URLS)
@pytest.mark.parametrize("allow_insecure", [False, True])
def test_no_secret_in_messages(url: str, allow_insecure: bool) -> None:
    assert "hunter2" not in redact_url(url)
    try:
        checked = check_url(url, allow_insecure=allow_insecure)
    except InsecureURLError as exc:
        said = [str(exc), exc.redacted, exc.reason, repr(exc)]
    else:
        said = [checked.redacted, checked.host, str(checked.warning)]
    assert not [text for text in said if "hunter2" in text]


def test_errors_are_value_errors_and_pickle() -> None:
    with pytest.raises(ValueError) as refused:
        check_url("ws://8.8.8.8")
    assert type(refused.value) is InsecureURLError
    again = pickle.loads(pickle.dumps(refused.value))
    assert type(again) is InsecureURLError
    assert (str(again), again.redacted, again.reason) == (
        str(refused.value),
        refused.value.redacted,
        refused.value.reason,
    )


def test_checked_url_is_frozen() -> None:
    checked = check_url("ws://10.0.0.1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        checked.private = False  # type: ignore[misc]
    assert CheckedURL("ws://x", "ws", "fe80::1%eth0", 9, True).redacted == "ws://[fe80::1%25eth0]:9"


def test_public_names() -> None:
    assert hosts.__all__ == [
        "CheckedURL", "ConnectOverrides", "InsecureURLError", "check_url", "is_loopback",
        "redact_url",
    ]  # fmt: skip


LOOPBACK = [
    # 127.0.0.0/8 (RFC 1122) at its edges, ::1 (RFC 4291), IPv4-mapped loopback.
    "127.0.0.1", "127.0.0.2", "127.0.0.0", "127.255.255.255", "::1", "[::1]", "0:0:0:0:0:0:0:1",
    "::ffff:127.0.0.1", "::ffff:127.1.2.3", "[::FFFF:7f00:1]",
    # localhost and every name under it (RFC 6761), any case, the root's dot or not.
    "localhost", "LOCALHOST", "localhost.", "x.localhost", "a.b.LocalHost", "x.localhost.",
]  # fmt: skip
NOT_LOOPBACK = [
    "126.255.255.255", "128.0.0.0", "0.0.0.0", "", "::", "::2", "::ffff:10.0.0.1",
    "::ffff:128.0.0.1", "::127.0.0.1", "64:ff9b::127.0.0.1", "10.0.0.1", "192.168.1.1",
    "example.com", "localhost.example.com", "notlocalhost", "localhost..", "xlocalhost",
]  # fmt: skip


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_hosts_per_the_rfcs(host: str) -> None:
    assert hosts.is_loopback(host)


@pytest.mark.parametrize("host", NOT_LOOPBACK)
def test_hosts_that_are_not_loopback(host: str) -> None:
    assert not hosts.is_loopback(host)


# The private set comes from the spec's constants: every listed network at both edges and just
# outside them, every name and every suffix.


def _networks(texts: tuple[str, ...]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(text) for text in texts]


def _listed(address: ipaddress.IPv4Address | ipaddress.IPv6Address, texts: tuple[str, ...]) -> bool:
    return any(address in network for network in _networks(texts))


def _ws(address: ipaddress.IPv4Address | ipaddress.IPv6Address, zone: str = "") -> str:
    return f"ws://[{address}{zone}]:8765" if address.version == 6 else f"ws://{address}:8765"


def _is_private(url: str) -> bool:
    try:
        return check_url(url).private
    except InsecureURLError as exc:
        assert PUBLIC in str(exc)
        return False


@pytest.mark.parametrize("texts", [PLAINTEXT_IPV4, PLAINTEXT_IPV6])
def test_every_listed_network_at_its_edges(texts: tuple[str, ...]) -> None:
    assert texts
    for network in _networks(texts):
        first, last = network.network_address, network.broadcast_address
        assert _is_private(_ws(first)), first
        assert _is_private(_ws(last)), last
        for outside in (first - 1, last + 1):
            assert _is_private(_ws(outside)) is _listed(outside, texts), outside
        if network.version == 4:
            mapped = ipaddress.IPv6Address(f"::ffff:{first}")
            assert _is_private(_ws(mapped)), mapped
            assert not _is_private(_ws(ipaddress.IPv6Address(f"::ffff:{first - 1}")))


def test_zones_only_on_the_listed_zone_networks() -> None:
    assert PLAINTEXT_IPV6_ZONE
    for network in _networks(PLAINTEXT_IPV6):
        for address in (network.network_address, network.broadcast_address):
            expected = _listed(address, PLAINTEXT_IPV6_ZONE)
            assert _is_private(_ws(address, "%25eth0")) is expected, address
    for network in _networks(PLAINTEXT_IPV6_ZONE):
        assert _is_private(_ws(network.network_address + 1, "%25eth0"))
        assert not _is_private(_ws(network.broadcast_address + 1, "%25eth0"))


def test_every_listed_name_and_suffix() -> None:
    assert PLAINTEXT_HOST_NAMES and PLAINTEXT_SUFFIXES
    for name in PLAINTEXT_HOST_NAMES:
        for written in (name, name.upper(), f"{name}."):
            assert check_url(f"ws://{written}") == CheckedURL(
                f"ws://{written}", "ws", name, 80, True
            )
        assert not _is_private(f"ws://{name}.example.com")
    for suffix in PLAINTEXT_SUFFIXES:
        for written in (f"agent{suffix}", f"A.B{suffix.upper()}", f"agent{suffix}."):
            checked = check_url(f"ws://{written}")
            assert (checked.private, checked.warning) == (True, None), written
            assert checked.host == written.lower().removesuffix(".")
        assert not _is_private(f"ws://agent{suffix}.example.com")
        assert not _is_private(f"ws://agent{suffix}x")


def test_single_label_policy_is_the_spec_s() -> None:
    assert PLAINTEXT_SINGLE_LABEL == "warn"
    checked = check_url("ws://agent")
    assert (checked.private, checked.warning) == (True, single_label_warning("agent"))


# What is accepted is what the resolver reads: an IPv4 host is what inet_aton reads, and a name is
# nothing inet_aton reads as a number (glibc's getaddrinfo tries inet_aton before DNS).


@pytest.mark.parametrize("case", params(lambda case: case.verdict in ("private", "warn")))
def test_accepted_hosts_mean_what_the_resolver_reads(case: Case) -> None:
    host = check_url(case.url).host
    if ":" in host:
        return
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        with pytest.raises(OSError):
            socket.inet_aton(host)
    else:
        assert socket.inet_aton(host) == address.packed


@pytest.mark.parametrize("case", params(lambda case: AMBIGUOUS in case.detail))
def test_refused_numeric_hosts_are_never_dotted_quads(case: Case) -> None:
    host = urlsplit(case.url).hostname
    assert host is not None
    with pytest.raises(ValueError):
        ipaddress.IPv4Address(host)  # never a canonical dotted quad


_URL_CHARS = string.ascii_letters[:8] + "XZ0123456789:/.[]@%25?#\\ \t-_~!ü"
_PREFIXES = st.sampled_from(["ws://", "wss://", "WS://", "http://", "ws:", "", "ws://[", "ws://a@"])


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(prefix=_PREFIXES, rest=st.text(alphabet=_URL_CHARS, max_size=24), insecure=st.booleans())
@example(prefix="ws://", rest="[fe80::1%25eth0]:1/", insecure=False)
@example(prefix="ws://", rest="0x7f.1", insecure=True)
@example(prefix="ws://", rest="a.local.", insecure=False)
def test_fuzz(prefix: str, rest: str, insecure: bool) -> None:
    url = prefix + rest
    redacted = redact_url(url)
    assert isinstance(redacted, str)
    try:
        checked = check_url(url, allow_insecure=insecure)
    except InsecureURLError as exc:
        assert str(exc).startswith(f"{redacted}: ")
        assert "\n" not in str(exc)
        return
    assert checked.redacted == redacted
    assert checked.private or checked.scheme == "wss" or insecure
    assert checked.warning is None or checked.scheme == "ws"
    # The standard library reads the same host and port.
    split = urlsplit(url)
    assert split.hostname is not None
    assert split.hostname.replace("%25", "%").removesuffix(".") == checked.host.lower()
    assert (split.port or {"ws": 80, "wss": 443}[checked.scheme]) == checked.port
    assert split.username is None and split.password is None and not split.fragment
    assert set(checked.host) <= set(string.ascii_letters + string.digits + "._-:%")


def test_a_standard_parser_that_reads_another_host_refuses_the_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A guard behind the own checks: no table URL reaches it, so the standard parser is swapped.
    monkeypatch.setattr(hosts, "urlsplit", lambda url: urlsplit("ws://8.8.8.8/"))
    with pytest.raises(InsecureURLError, match=r"parsers disagree on its host"):
        check_url("ws://10.0.0.1/")

    def refuse(url: str) -> None:
        raise ValueError("Invalid IPv6 URL")

    monkeypatch.setattr(hosts, "urlsplit", refuse)
    with pytest.raises(InsecureURLError, match=r"^ws://10\.0\.0\.1:80: unparseable URL$"):
        check_url("ws://10.0.0.1/")
