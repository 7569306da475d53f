"""The engine side's configuration of its agent links: where each call's agent is
(:class:`AgentTarget`, from the environment and the ``[agent_link]`` TOML section, with named
routes), the private CA bundle, and the caller identity a call may carry.

```text
config = load_config()                               # BRISVOX_AGENT_* and [agent_link]
target = config.target(route="billing")              # a route name, never a URL
```

Every name here is importable from :mod:`voxwire.brisvox.engine` too.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import ssl as ssl_module
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from msgspec import UNSET

from voxwire.brisvox.constants import (
    AGENT_ALLOW_INSECURE_ENV,
    AGENT_CALLER_IDENTITY_ENV,
    AGENT_RECONNECT_ATTEMPTS_ENV,
    AGENT_RECONNECT_WINDOW_ENV,
    AGENT_TLS_CA_ENV,
    AGENT_TOKEN_ENV,
    AGENT_URL_ENV,
    CA_BUNDLE_MAX_BYTES,
    CA_BUNDLE_MAX_CERTIFICATES,
    MAX_SIP_USER_PART_LENGTH,
    RECONNECT_WINDOW_MS,
)
from voxwire.brisvox.engine_settings import LinkSettings
from voxwire.brisvox.messages import CallIdentity
from voxwire.errors import ConfigError
from voxwire.hosts import CheckedURL, check_url

__all__ = [
    "AgentLinkConfig",
    "AgentTarget",
    "CABundleError",
    "ConfigError",
    "caller_identity",
    "load_ca_bundle",
    "load_config",
    "sip_user_part",
]

log = logging.getLogger("voxwire.brisvox.engine")

_SECTION_KEYS: Final = frozenset(
    {"url", "token_env", "allow_insecure", "caller_identity", "routes"}
)
_ROUTE_KEYS: Final = frozenset({"name", "url", "token_env", "allow_insecure", "caller_identity"})
_PEM_BEGIN: Final = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----")
_PEM_END: Final = re.compile(r"-----END ([A-Z0-9 ]+)-----")
_SIP_USER: Final = re.compile(rf"[0-9A-Za-z+*#._-]{{1,{MAX_SIP_USER_PART_LENGTH}}}")
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})


class CABundleError(ConfigError):
    """The private CA bundle is missing, empty, too large or malformed."""


@dataclass(frozen=True, slots=True)
class AgentTarget:
    """Where one call's agent process is: the checked URL, its token, the identity opt-in."""

    url: CheckedURL
    token: str | None = field(default=None, repr=False)
    caller_identity: bool = False
    route: str | None = None
    """The route's name; None for the default agent process."""


@dataclass(frozen=True, slots=True)
class AgentLinkConfig:
    """The engine's agent links: the default target, the named routes, TLS and the bounds."""

    default: AgentTarget | None
    routes: Mapping[str, AgentTarget]
    ssl: ssl_module.SSLContext | None = None
    """The private CA added to the default roots, for every wss:// target."""
    settings: LinkSettings = field(default_factory=LinkSettings)

    def target(self, route: str | None = None) -> AgentTarget | None:
        """The target of a call: its named route, else the default (an unknown route falls back
        and is logged). A call names a route, never a URL."""
        if route is not None:
            found = self.routes.get(route)
            if found is not None:
                return found
            log.warning("unknown agent route %r; using the default agent", route)
        return self.default


def load_config(
    *,
    environ: Mapping[str, str] | None = None,
    toml: Path | Mapping[str, Any] | None = None,
) -> AgentLinkConfig:
    """Read the environment and the ``[agent_link]`` section (a TOML file or a parsed document).

    The section's url wins over ``BRISVOX_AGENT_URL`` and its ``caller_identity`` over
    ``BRISVOX_AGENT_CALLER_IDENTITY``; a route has its own url, ``token_env``, ``allow_insecure``
    and ``caller_identity`` and inherits none of them. Raises :class:`ConfigError` naming what
    is wrong (an insecure URL raises ``voxwire.hosts.InsecureURLError``, also a ValueError).
    """
    env = os.environ if environ is None else environ
    if isinstance(toml, Path):
        try:
            document: Mapping[str, Any] = tomllib.loads(toml.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{toml}: {exc}") from None
    else:
        document = toml or {}
    section = document.get("agent_link", {})
    if not isinstance(section, Mapping):
        raise ConfigError("[agent_link] must be a table")
    _no_unknown_keys(section, _SECTION_KEYS, "[agent_link]")
    warned: set[str] = set()

    url = _str_setting(section, "url", "[agent_link]") or env.get(AGENT_URL_ENV) or None
    default: AgentTarget | None = None
    if url is not None:
        token_env = _str_setting(section, "token_env", "[agent_link]")
        token = _token(env, token_env, "[agent_link] token_env") if token_env else None
        if token_env is None:
            token = env.get(AGENT_TOKEN_ENV) or None
        allow = _bool_setting(section, "allow_insecure", "[agent_link]")
        identity = _bool_setting(section, "caller_identity", "[agent_link]")
        default = AgentTarget(
            _check(url, bool(allow) or _env_bool(env, AGENT_ALLOW_INSECURE_ENV), "default", warned),
            token,
            identity if identity is not None else _env_bool(env, AGENT_CALLER_IDENTITY_ENV),
        )

    routes: dict[str, AgentTarget] = {}
    raw_routes = section.get("routes", [])
    if not isinstance(raw_routes, list):
        raise ConfigError("[agent_link] routes must be an array of tables ([[agent_link.routes]])")
    for index, raw in enumerate(raw_routes):
        where = f"[[agent_link.routes]] #{index + 1}"
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where} must be a table")
        _no_unknown_keys(raw, _ROUTE_KEYS, where)
        name = _str_setting(raw, "name", where)
        route_url = _str_setting(raw, "url", where)
        if not name or not route_url:
            raise ConfigError(f"{where} needs a name and a url")
        if name in routes:
            raise ConfigError(f"{where}: route {name!r} is defined twice")
        token_env = _str_setting(raw, "token_env", where)
        routes[name] = AgentTarget(
            _check(route_url, bool(_bool_setting(raw, "allow_insecure", where)), name, warned),
            _token(env, token_env, f"{where} token_env") if token_env else None,
            bool(_bool_setting(raw, "caller_identity", where)),
            name,
        )

    attempts = _env_int(env, AGENT_RECONNECT_ATTEMPTS_ENV, LinkSettings().reconnect_attempts, 0)
    window_ms = _env_int(env, AGENT_RECONNECT_WINDOW_ENV, RECONNECT_WINDOW_MS, 1)
    ca_path = env.get(AGENT_TLS_CA_ENV)
    return AgentLinkConfig(
        default,
        routes,
        load_ca_bundle(ca_path) if ca_path else None,
        LinkSettings(reconnect_attempts=attempts, reconnect_window=window_ms / 1000),
    )


def load_ca_bundle(path: str | Path) -> ssl_module.SSLContext:
    """A TLS context with the default roots plus the private CA bundle at ``path``.

    The bundle must be a regular file holding 1 to 16 PEM certificates in at most 256 KiB,
    counted by this scan (OpenSSL would accept more); a missing, empty or malformed file, or
    anything but a regular file (a FIFO would block the startup forever, a device never end),
    raises :class:`CABundleError`.
    """
    where = f"{AGENT_TLS_CA_ENV} {path}"
    try:
        # Opened without blocking (a FIFO would wait for a writer), then judged by what it is.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
            data = _read_at_most(fd, CA_BUNDLE_MAX_BYTES + 1) if regular else b""
        finally:
            os.close(fd)
    except OSError as exc:
        raise CABundleError(f"{where}: cannot be read: {exc.strerror}") from None
    if not regular:
        raise CABundleError(f"{where}: not a regular file")
    if len(data) > CA_BUNDLE_MAX_BYTES:
        raise CABundleError(f"{where}: larger than {CA_BUNDLE_MAX_BYTES} bytes")
    count = _count_pem_certificates(data, where)
    if count > CA_BUNDLE_MAX_CERTIFICATES:
        raise CABundleError(f"{where}: {count} certificates, at most {CA_BUNDLE_MAX_CERTIFICATES}")
    context = ssl_module.create_default_context()
    try:
        context.load_verify_locations(cadata=data.decode("ascii"))
    except ssl_module.SSLError as exc:
        raise CABundleError(f"{where}: not a valid certificate bundle: {exc.reason}") from None
    return context


def _read_at_most(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while size > 0 and (chunk := os.read(fd, size)):
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _count_pem_certificates(data: bytes, where: str) -> int:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise CABundleError(f"{where}: not PEM text (non-ASCII bytes)") from None
    count = 0
    body: list[str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if (begin := _PEM_BEGIN.fullmatch(line)) is not None:
            if body is not None:
                raise CABundleError(f"{where}: line {number}: BEGIN inside a PEM block")
            if begin.group(1) not in ("CERTIFICATE", "TRUSTED CERTIFICATE"):
                raise CABundleError(
                    f"{where}: line {number}: a {begin.group(1)} block is no certificate"
                )
            body = []
        elif (end := _PEM_END.fullmatch(line)) is not None:
            if body is None:
                raise CABundleError(f"{where}: line {number}: END outside a PEM block")
            try:
                der = base64.b64decode("".join(body), validate=True)
            except (binascii.Error, ValueError):
                raise CABundleError(f"{where}: line {number}: the block is not base64") from None
            if (
                not der
                or der[0] != 0x30
                or end.group(1) not in ("CERTIFICATE", "TRUSTED CERTIFICATE")
            ):
                raise CABundleError(f"{where}: line {number}: the block is not a certificate")
            count += 1
            body = None
        elif body is not None:
            body.append(line)
    if body is not None:
        raise CABundleError(f"{where}: a PEM block is not closed")
    if count == 0:
        raise CABundleError(f"{where}: holds no certificate")
    return count


def sip_user_part(uri: str) -> str | None:
    """The user part of a SIP ``From``/``To`` value (``"Ann" <sip:+1555@trunk>``, ``tel:+1555``)
    when it passes the filter (1 to 64 of ``0-9 A-Z a-z + * # . _ -``), else None."""
    inner = uri[uri.index("<") + 1 : uri.index(">")] if "<" in uri and ">" in uri else uri
    scheme, colon, rest = inner.strip().partition(":")
    scheme = scheme.lower()
    if not colon:
        return None
    if scheme == "tel":
        user = rest.split(";", 1)[0]
    elif scheme in ("sip", "sips"):
        user, at, _ = rest.partition("@")
        if not at:
            return None
    else:
        return None
    return user if _SIP_USER.fullmatch(user) else None


def caller_identity(
    carrier: str,
    carrier_call_id: str | None,
    *,
    from_: str | None = None,
    to: str | None = None,
    redact: bool = False,
) -> CallIdentity | None:
    """The ``session.start.call`` of a telephony call, or None without a carrier call id.

    For ``sip`` a number is kept only when it passes the user-part filter; ``redact`` withholds
    the numbers (``pii_redacted``) while the carrier and its id are still sent.
    """
    if not carrier_call_id:
        return None
    if redact:
        return CallIdentity(carrier=carrier, carrier_call_id=carrier_call_id, pii_redacted=True)

    def keep(number: str | None) -> str | None:
        if number is None or (carrier == "sip" and not _SIP_USER.fullmatch(number)):
            return None
        return number

    kept_from, kept_to = keep(from_), keep(to)
    return CallIdentity(
        carrier=carrier,
        carrier_call_id=carrier_call_id,
        from_=kept_from if kept_from is not None else UNSET,
        to=kept_to if kept_to is not None else UNSET,
    )


def _check(url: str, allow_insecure: bool, name: str, warned: set[str]) -> CheckedURL:
    checked = check_url(url, allow_insecure=allow_insecure)
    if checked.warning and checked.host not in warned:
        warned.add(checked.host)
        log.warning("agent %s %s: %s", name, checked.redacted, checked.warning)
    log.info("agent %s at %s", name, checked.redacted)
    return checked


def _token(env: Mapping[str, str], name: str, where: str) -> str | None:
    if name not in env:
        raise ConfigError(f"{where}: the environment variable {name} is not set")
    return env[name] or None


def _no_unknown_keys(table: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {sorted(known)}")


def _str_setting(table: Mapping[str, Any], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{where} {key} must be a string, not {type(value).__name__}")
    return value


def _bool_setting(table: Mapping[str, Any], key: str, where: str) -> bool | None:
    value = table.get(key)
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{where} {key} must be true or false, not {value!r}")
    return value


def _env_bool(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name} must be 1 or 0 (true/false), not {env[name]!r}")


def _env_int(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    value = env.get(name, "").strip()
    if not value:
        return default
    if not value.isascii() or not value.isdigit() or int(value) < minimum:
        raise ConfigError(f"{name} must be an integer of at least {minimum}, not {value!r}")
    return int(value)
