"""The OVP gateway's session tokens: HS256 JWTs minted by the platform, verified by the gateway
for the path's session (:func:`verify_token`), and minted here for tests and emulators
(:func:`mint_token`). A token never appears in a log line, an exception text or a repr.

```python
from voxwire.ovp.gateway_tokens import mint_token, verify_token

secret = "a-gateway-secret-of-at-least-32-bytes"
token = mint_token(secret, session_id="ovps_1", tenant_id="acme")
claims = verify_token(token, secret, "ovps_1")
assert claims.tenant_id == "acme" and "ey" not in repr(claims)
```

Every name here is importable from :mod:`voxwire.ovp.gateway` too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import jwt

from voxwire.errors import ConfigError, VoxwireError
from voxwire.ovp import (
    JWT_ALGORITHM,
    MAX_TOKEN_LIFETIME_S,
    MIN_GATEWAY_SECRET_BYTES,
    TOKEN_CLOCK_LEEWAY_S,
)

__all__ = [
    "GatewayConfigError",
    "TokenClaims",
    "TokenRejected",
    "check_secret",
    "mint_token",
    "verify_token",
]

_REQUIRED_CLAIMS: Final = ("exp", "iat", "tenant_id", "session_id")


class GatewayConfigError(ConfigError):
    """A gateway configuration that must not start (a secret shorter than 32 bytes)."""


class TokenRejected(VoxwireError, ValueError):
    """A token the gateway refuses; the text says why and never holds the token."""


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """The verified claims of a session token (the token itself is not kept)."""

    tenant_id: str
    session_id: str
    issued_at: float
    expires_at: float
    claims: Mapping[str, Any] = field(repr=False)
    """Every claim, the call context included."""


def check_secret(secret: str | bytes) -> bytes:
    """The HS256 key of a gateway secret; :class:`GatewayConfigError` when it is shorter than
    32 bytes (RFC 7518 §3.2)."""
    key = secret.encode() if isinstance(secret, str) else bytes(secret)
    if len(key) < MIN_GATEWAY_SECRET_BYTES:
        raise GatewayConfigError(
            f"the gateway secret is {len(key)} bytes; HS256 needs at least "
            f"{MIN_GATEWAY_SECRET_BYTES} (RFC 7518 §3.2)"
        )
    return key


def mint_token(
    secret: str | bytes,
    *,
    session_id: str,
    tenant_id: str,
    lifetime_s: int = MAX_TOKEN_LIFETIME_S,
    now: float | None = None,
    **context: Any,
) -> str:
    """An HS256 session token as the platform mints it (for tests and gateway emulators)."""
    issued = int(time.time() if now is None else now)
    claims = {
        **context,
        "tenant_id": tenant_id,
        "session_id": session_id,
        "iat": issued,
        "exp": issued + lifetime_s,
    }
    return jwt.encode(claims, check_secret(secret), algorithm=JWT_ALGORITHM)


def verify_token(
    token: str, secret: str | bytes, session_id: str, *, now: float | None = None
) -> TokenClaims:
    """Verify a session token for the path's ``session_id``; raise :class:`TokenRejected`.

    HS256 only (the header's ``alg`` is never trusted), signature, ``exp`` and ``iat`` with 30 s
    of leeway, a lifetime ``exp - iat`` of at most 300 s, and ``tenant_id`` and ``session_id``
    claims, the latter equal to the path's.
    """
    moment = time.time() if now is None else now
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            check_secret(secret),
            algorithms=[JWT_ALGORITHM],
            options={"require": list(_REQUIRED_CLAIMS)},
            leeway=TOKEN_CLOCK_LEEWAY_S,
        )
    except jwt.ExpiredSignatureError:
        raise TokenRejected("token expired") from None
    except jwt.ImmatureSignatureError:
        raise TokenRejected("token issued in the future") from None
    except jwt.InvalidSignatureError:
        raise TokenRejected("token signature does not verify") from None
    except jwt.InvalidAlgorithmError:
        raise TokenRejected(f"token algorithm is not {JWT_ALGORITHM}") from None
    except jwt.MissingRequiredClaimError as exc:
        raise TokenRejected(f"token lacks the {exc.claim} claim") from None
    except jwt.DecodeError:
        raise TokenRejected("malformed token") from None
    except jwt.InvalidTokenError as exc:
        raise TokenRejected(f"invalid token ({type(exc).__name__})") from None
    issued, expires = claims["iat"], claims["exp"]
    if not all(_is_number(value) for value in (issued, expires)):
        raise TokenRejected("token iat and exp must be numbers")
    if issued > moment + TOKEN_CLOCK_LEEWAY_S:
        raise TokenRejected("token issued in the future")
    if expires - issued > MAX_TOKEN_LIFETIME_S:
        raise TokenRejected(
            f"token lives {expires - issued:g} s, at most {MAX_TOKEN_LIFETIME_S} s is allowed"
        )
    tenant = claims["tenant_id"]
    if not isinstance(tenant, str) or not tenant:
        raise TokenRejected("token tenant_id is not a non-empty string")
    if claims["session_id"] != session_id:
        raise TokenRejected("token is for another session")
    return TokenClaims(tenant, session_id, float(issued), float(expires), claims)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
