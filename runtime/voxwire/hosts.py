"""The plaintext ``ws://`` host rule, judged on the URL text alone, URL redaction for logs, and
whether a server's listening host is loopback (:func:`is_loopback`, for both servers).

The rule is Brisvox's (``transport.plaintext_hosts`` in ``spec/brisvox.yaml``); the OVP client
reuses it. ``wss://`` goes to any host. ``ws://`` goes only to a host whose *text* is private: an
address in a listed network, ``localhost``, a name under a listed suffix, or a single-label name
(accepted with a warning). Nothing is resolved. Whatever could be read two ways (credentials,
backslashes, percent-encoding, IDNA, numeric shorthands such as ``127.1``) is refused outright.

```python
checked = check_url("ws://agent.internal:8765/agent?token=secret")
assert checked.private and checked.redacted == "ws://agent.internal:8765"
```
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Literal, TypedDict
from urllib.parse import urlsplit

from voxwire.brisvox.constants import (
    PLAINTEXT_HOST_NAMES,
    PLAINTEXT_IPV4,
    PLAINTEXT_IPV6,
    PLAINTEXT_IPV6_ZONE,
    PLAINTEXT_SINGLE_LABEL,
    PLAINTEXT_SUFFIXES,
)
from voxwire.errors import ConfigError

__all__ = [
    "CheckedURL",
    "ConnectOverrides",
    "InsecureURLError",
    "check_url",
    "is_loopback",
    "redact_url",
]

UNPARSEABLE = "<unparseable URL>"

_IPV4_NETWORKS = tuple(ipaddress.IPv4Network(net) for net in PLAINTEXT_IPV4)
_IPV6_NETWORKS = tuple(ipaddress.IPv6Network(net) for net in PLAINTEXT_IPV6)
_IPV6_ZONE_NETWORKS = tuple(ipaddress.IPv6Network(net) for net in PLAINTEXT_IPV6_ZONE)
_HOST_NAMES = frozenset(name.lower() for name in PLAINTEXT_HOST_NAMES)
_SUFFIXES = tuple(suffix.lower() for suffix in PLAINTEXT_SUFFIXES)
_SINGLE_LABEL: str = PLAINTEXT_SINGLE_LABEL  # "accept", "warn" or "refuse"

_DEFAULT_PORTS = {"ws": 80, "wss": 443, "http": 80, "https": 443}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
# Where the authority ends; WHATWG parsers end it at a backslash too (ws is a special scheme).
_AUTHORITY_END = re.compile(r"[/?#\\]")
_NAME_CHARS = re.compile(r"[a-z0-9_\-]+")
# A last label a WHATWG URL parser reads as a number, which makes the whole host an IPv4 address.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_DOTTED_QUAD = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
_IPV6_CHARS = re.compile(r"[0-9a-f:.]+")
_ZONE_ID = re.compile(r"[A-Za-z0-9._~\-]+")  # RFC 6874: unreserved characters
_REDACTABLE_HOST = re.compile(r"[A-Za-z0-9._~%:\-]+")


class ConnectOverrides(TypedDict, total=False):
    """Keyword arguments for ``websockets`` ``connect``: where to open the TCP connection."""

    host: str
    port: int


class InsecureURLError(ConfigError):
    """A URL refused by the plaintext host rule, or malformed; the text never holds secrets.

    Attributes:
        redacted: The URL as ``scheme://host:port``, or ``<unparseable URL>``.
        reason: Why it was refused, in one line.
    """

    def __init__(self, redacted: str, reason: str) -> None:
        self.redacted = redacted
        self.reason = reason
        super().__init__(f"{redacted}: {reason}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.redacted, self.reason))


@dataclass(frozen=True)
class CheckedURL:
    """A URL that passed ``check_url``; its ``repr`` shows the redacted URL, never the query.

    Attributes:
        url: The URL as given (it may carry a token: never log it, log ``redacted``).
        scheme: ``"ws"`` or ``"wss"``.
        host: Lowercased, without IPv6 brackets or one trailing dot; a zone reads ``fe80::1%eth0``.
        port: The explicit port, else 80 (ws) or 443 (wss).
        private: Whether the host is in the private set.
        warning: What to log once at startup (single-label host, allow_insecure), else ``None``.
    """

    url: str = field(repr=False)
    scheme: Literal["ws", "wss"]
    host: str
    port: int
    private: bool
    warning: str | None = None

    @property
    def redacted(self) -> str:
        """``scheme://host:port`` for logs, the IPv6 address in brackets."""
        return f"{self.scheme}://{_host_for_url(self.host)}:{self.port}"

    def connect_overrides(self) -> ConnectOverrides:
        """Keyword arguments for ``websockets`` ``connect(url, ...)``: the host and port to hand
        ``getaddrinfo`` when the URL's own text would fail there (an IPv6 zone is written
        ``%25eth0`` in a URL and ``%eth0`` to the resolver); empty otherwise."""
        if "%" in self.host:
            return {"host": self.host, "port": self.port}
        return {}


class _Malformed(Exception):
    """A URL no setting can make acceptable."""


@dataclass(frozen=True)
class _Parts:
    scheme: str  # lowercased
    authority: str = field(repr=False)  # may hold credentials
    userinfo: str | None = field(repr=False)
    host: str  # as written, brackets removed
    bracketed: bool
    port: str | None  # the text after ':', None without ':'
    tail: str = field(repr=False)  # path, query and fragment: may hold a token


@dataclass(frozen=True)
class _Host:
    host: str  # normalised
    private: bool
    shown: str  # how the reason names it
    why_public: str = ""  # said after the host when it is not private
    warning: str | None = None


def check_url(url: str, *, allow_insecure: bool = False) -> CheckedURL:
    """Accept ``url`` for a WebSocket link, or raise ``InsecureURLError``.

    ``wss://`` is accepted to any host; ``ws://`` only to a private host (see the module), or to
    any host with ``allow_insecure``. A malformed URL is refused whatever ``allow_insecure`` says.
    """
    label = redact_url(url)
    try:
        parts = _parse(url)
        port = _port(parts)
        judged = _judge_ipv6(parts.host) if parts.bracketed else _judge_name(parts.host)
        _cross_check(url, parts)
    except _Malformed as exc:
        raise InsecureURLError(label, str(exc)) from None
    scheme: Literal["ws", "wss"] = "ws" if parts.scheme == "ws" else "wss"
    checked = CheckedURL(url, scheme, judged.host, port, judged.private)
    if scheme == "wss":
        return checked
    if judged.private:
        return CheckedURL(url, scheme, judged.host, port, True, judged.warning)
    if allow_insecure:
        warning = (
            f"plaintext ws:// to a public host {judged.shown}{judged.why_public} allowed by "
            "allow_insecure: nothing encrypts this link"
        )
        return CheckedURL(url, scheme, judged.host, port, False, warning)
    raise InsecureURLError(
        checked.redacted,
        f"plaintext ws:// to a public host {judged.shown}{judged.why_public}: use wss://, "
        "or allow_insecure",
    )


def is_loopback(host: str) -> bool:
    """Whether a server listening on ``host`` is reachable from this machine only.

    Loopback is ``127.0.0.0/8`` and ``::1`` (RFC 1122, RFC 4291), an IPv4-mapped loopback
    address (``::ffff:127.0.0.1``), and the name ``localhost`` and every name under it
    (``x.localhost``, RFC 6761), in any case, with or without brackets or the root's final dot.
    Anything else, the wildcard (``""``, ``0.0.0.0``, ``::``) included, is not.
    """
    name = host.removeprefix("[").removesuffix("]").lower()
    name = name.removesuffix(".") if not name.endswith("..") else name
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def redact_url(url: str) -> str:
    """``scheme://host:port`` of ``url`` for logs (no userinfo, path or query); never raises.

    Returns ``<unparseable URL>`` when no host and port can be read safely.
    """
    try:
        parts = _split(url)
        if not _REDACTABLE_HOST.fullmatch(parts.host):
            return UNPARSEABLE
        if parts.bracketed:
            address, percent, zone = parts.host.partition("%")
            if percent and not zone.startswith("25"):
                return UNPARSEABLE
            host = address.lower() + (f"%{zone[2:]}" if percent else "")
        else:
            host = parts.host.lower()
            host = host.removesuffix(".") if not host.endswith("..") else host
        if parts.port:
            if not parts.port.isascii() or not parts.port.isdigit() or len(parts.port) > 5:
                return UNPARSEABLE
            port: int | None = int(parts.port)
        else:
            port = _DEFAULT_PORTS.get(parts.scheme)
        shown = _host_for_url(host) if parts.bracketed else host
        return f"{parts.scheme}://{shown}" + ("" if port is None else f":{port}")
    except Exception:
        return UNPARSEABLE


def _host_for_url(host: str) -> str:
    return f"[{host.replace('%', '%25')}]" if ":" in host else host


def _split(url: str) -> _Parts:
    """Cut ``url`` into scheme, authority and the rest, and the authority into its parts."""
    if not isinstance(url, str):
        raise _Malformed("not a string")
    scheme = _SCHEME.match(url)
    if scheme is None:
        raise _Malformed("no scheme: expected ws:// or wss://")
    rest = url[scheme.end() :]
    if not rest.startswith("//"):
        raise _Malformed("no host: expected ws://host or wss://host")
    rest = rest[2:]
    end = _AUTHORITY_END.search(rest)
    cut = len(rest) if end is None else end.start()
    authority, tail = rest[:cut], rest[cut:]
    userinfo, at, hostport = authority.rpartition("@")
    port: str | None
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0:
            raise _Malformed("an IPv6 address opened with [ has no ]")
        host, after = hostport[1:close], hostport[close + 1 :]
        if after and not after.startswith(":"):
            raise _Malformed("text after the ] of an IPv6 address")
        port = after[1:] if after else None
    else:
        if hostport.count(":") > 1:
            raise _Malformed(
                "more than one ':' outside brackets (an IPv6 address must be written in "
                "brackets, as in [::1])"
            )
        host, colon, port_text = hostport.partition(":")
        port = port_text if colon else None
    return _Parts(
        scheme=scheme.group()[:-1].lower(),
        authority=authority,
        userinfo=userinfo if at else None,
        host=host,
        bracketed=hostport.startswith("["),
        port=port,
        tail=tail,
    )


def _parse(url: str) -> _Parts:
    """Split ``url`` and refuse what parsers could read two ways."""
    if not isinstance(url, str):
        raise _Malformed("not a string")
    for index, char in enumerate(url):
        if char.isspace() or ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F:
            raise _Malformed(f"whitespace or control character U+{ord(char):04X} at index {index}")
    if "\\" in url:
        raise _Malformed("backslash in the URL (WHATWG URL parsers read it as /)")
    scheme = _SCHEME.match(url)
    if scheme is None:
        raise _Malformed("no scheme: expected ws:// or wss://")
    name = scheme.group()[:-1].lower()
    if name not in ("ws", "wss"):
        raise _Malformed(f"scheme {name!r} is not ws or wss")
    parts = _split(url)
    if not parts.authority.isascii():
        raise _Malformed("non-ASCII character in the host (IDNA names are refused)")
    if parts.userinfo is not None:
        raise _Malformed("credentials (userinfo before @) in the URL are refused")
    if "#" in parts.tail:
        raise _Malformed("fragment (#) in a WebSocket URL (RFC 6455 forbids it)")
    if not parts.host:
        raise _Malformed("no host")
    return parts


def _port(parts: _Parts) -> int:
    if parts.port is None:
        return _DEFAULT_PORTS[parts.scheme]
    if not parts.port:
        raise _Malformed("empty port after ':'")
    if not parts.port.isdigit():
        raise _Malformed("port is not a number")
    if len(parts.port) > 5 or not 1 <= int(parts.port) <= 65535:
        shown = parts.port if len(parts.port) <= 10 else parts.port[:10] + "..."
        raise _Malformed(f"port {shown} is not in 1..65535")
    return int(parts.port)


def _cross_check(url: str, parts: _Parts) -> None:
    """The standard library must read the same scheme and authority (it is lenient, not wrong)."""
    try:
        split = urlsplit(url)
    except ValueError:
        raise _Malformed("unparseable URL") from None
    if split.scheme != parts.scheme or split.netloc != parts.authority:
        raise _Malformed("unparseable URL (parsers disagree on its host)")


def _judge_ipv4(address: ipaddress.IPv4Address, shown: str) -> _Host:
    private = any(address in network for network in _IPV4_NETWORKS)
    return _Host(str(address), private, shown)


def _judge_ipv6(text: str) -> _Host:
    zone: str | None = None
    percent = text.find("%")
    if percent >= 0:
        if text[percent : percent + 3] != "%25":
            raise _Malformed("a zone id must be written %25, as in [fe80::1%25eth0]")
        zone = text[percent + 3 :]
        if "%" in zone:
            raise _Malformed("percent-encoded character in the zone id")
        if not _ZONE_ID.fullmatch(zone):
            raise _Malformed(
                f"zone id {zone!r} is empty or not letters, digits, '.', '_', '~', '-'"
            )
        text = text[:percent]
    literal = text.lower()
    try:
        if not _IPV6_CHARS.fullmatch(literal):
            raise ValueError(literal)
        address = ipaddress.IPv6Address(literal)
    except ValueError:
        raise _Malformed(f"[{text}] is not an IPv6 address") from None
    if zone is not None:
        host = f"{literal}%{zone}"
        private = any(address in network for network in _IPV6_ZONE_NETWORKS)
        why = f" (a zone id counts only on {', '.join(PLAINTEXT_IPV6_ZONE)})"
        return _Host(host, private, host, "" if private else why)
    mapped = address.ipv4_mapped
    if mapped is not None:
        return _Host(literal, _judge_ipv4(mapped, literal).private, literal)
    return _Host(literal, any(address in network for network in _IPV6_NETWORKS), literal)


def _judge_name(text: str) -> _Host:
    written = text.lower()
    if "%" in written:
        raise _Malformed("percent-encoded character in the host")
    if written.endswith(".."):
        raise _Malformed(f"more than one trailing dot in host {written!r}")
    absolute = written.endswith(".")
    name = written.removesuffix(".")
    if not name:
        raise _Malformed("no host")
    labels = name.split(".")
    for label in labels:
        if not label:
            raise _Malformed(f"empty label in host {written!r}")
        if not _NAME_CHARS.fullmatch(label):
            char = next(c for c in label if not _NAME_CHARS.fullmatch(c))
            raise _Malformed(f"character {char!r} is not allowed in a host name")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        # A WHATWG parser reads this host as an IPv4 address; only the dotted quad is unambiguous.
        if absolute or not _DOTTED_QUAD.fullmatch(name):
            raise _Malformed(
                f"ambiguous numeric host {written!r}: URL parsers read shorthand, octal and hex "
                "forms as IPv4 addresses; write a dotted quad such as 127.0.0.1"
            )
        return _judge_ipv4(ipaddress.IPv4Address(name), name)
    if any(label.startswith("xn--") for label in labels):
        raise _Malformed(f"IDNA (xn--) host name {written!r} is refused")
    if len(name) > 253 or any(len(label) > 63 for label in labels):
        raise _Malformed("host name longer than 253 characters or a label longer than 63")
    if name in _HOST_NAMES or name.endswith(_SUFFIXES):
        return _Host(name, True, written)
    if len(labels) == 1:
        if absolute:
            why = " (an absolute single label is a top-level domain, not a service name)"
            return _Host(name, False, written, why)
        if _SINGLE_LABEL == "accept":
            return _Host(name, True, written)
        if _SINGLE_LABEL == "warn":
            warning = (
                f"single-label host {name!r} may resolve through the search list to a public "
                f"name; prefer {name}.internal or {name}.local"
            )
            return _Host(name, True, written, warning=warning)
    return _Host(name, False, written)
