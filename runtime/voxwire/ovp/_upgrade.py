"""The OVP client's WebSocket upgrade: the subprotocol offered verbatim, and a refusal read into a
:class:`~voxwire.errors.HandshakeError`. Not public: :mod:`voxwire.ovp.client` is.

About the subprotocol: ``/`` is not a token character (RFC 6455 §4.1 and RFC 2616), so
``orbit-voice/1.0`` is not a legal subprotocol name. ``websockets`` refuses to offer it
(``validate_subprotocols`` in ``connect``) and to read it back (``parse_subprotocol``), and a
browser's ``WebSocket`` constructor throws. OVP requires it all the same, so this client offers it
through its own ``ClientProtocol`` subclass, passed in with ``connect(create_connection=...)``, the
hook ``websockets`` documents for customising a connection; the subclass compares the server's
answer to ``orbit-voice/1.0`` exactly. The workaround is verified for websockets 13 to 17
(``VERIFIED_WEBSOCKETS``).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Final

from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.datastructures import Headers
from websockets.exceptions import InvalidHandshake, InvalidMessage, InvalidStatus, NegotiationError
from websockets.typing import Subprotocol

from voxwire.errors import HandshakeError
from voxwire.ovp import MAX_RECEIVE_BYTES, RECONNECT_RETRIED_HTTP_STATUSES, SUBPROTOCOL, ErrorCode
from voxwire.redaction import redact

__all__ = ["VERIFIED_WEBSOCKETS", "OfferingConnection", "passing", "refusal", "upgrade"]

VERIFIED_WEBSOCKETS: Final = ((13, 0), (18, 0))
"""The websockets versions (from inclusive, to exclusive) the subprotocol workaround is verified
for; a test fails on any other."""

_OFFERED: Final = [Subprotocol(SUBPROTOCOL)]


class _Protocol(ClientProtocol):
    """Requires the server to select exactly ``orbit-voice/1.0``."""

    def process_subprotocol(self, headers: Headers) -> Subprotocol | None:
        selected = headers.get_all("Sec-WebSocket-Protocol")
        if selected != [SUBPROTOCOL]:
            shown = ", ".join(selected) if selected else "no subprotocol"
            raise NegotiationError(f"the gateway selected {shown}, not {SUBPROTOCOL}")
        return _OFFERED[0]


class OfferingConnection(ClientConnection):
    """A connection that offers ``orbit-voice/1.0`` verbatim (websockets refuses the ``/``)."""

    def __init__(self, protocol: ClientProtocol, **kwargs: Any) -> None:
        # The URI the factory parsed: ``uri`` since websockets 15, ``wsuri`` before.
        uri = getattr(protocol, "uri", None) or protocol.wsuri  # type: ignore[attr-defined]
        ovp_protocol = _Protocol(
            uri, subprotocols=_OFFERED, max_size=MAX_RECEIVE_BYTES, logger=protocol.logger
        )
        super().__init__(ovp_protocol, **kwargs)


async def upgrade(
    url: str, redacted: str, *, open_timeout: float, close_timeout: float, **options: Any
) -> ClientConnection:
    """Open the WebSocket to ``url`` offering exactly ``orbit-voice/1.0``. Raises
    :class:`~voxwire.errors.HandshakeError` (a refused upgrade, with its HTTP status and OVP
    code; the subprotocol not echoed) or ``ConnectionError``, naming ``redacted``, never the
    token of the URL."""
    failure: Exception
    try:
        return await connect(
            url,
            create_connection=OfferingConnection,
            compression=None,
            max_size=MAX_RECEIVE_BYTES,
            open_timeout=open_timeout,
            ping_interval=None,  # the link's keepalive
            close_timeout=close_timeout,
            **options,
        )
    except InvalidStatus as exc:
        failure = refusal(exc)
    except NegotiationError as exc:
        failure = HandshakeError(
            f"{redacted}: {exc}",
            status=101,
            code=ErrorCode.OVP_SUBPROTOCOL_MISMATCH,
        )
    except InvalidMessage as exc:
        failure = ConnectionError(f"{redacted}: {redact(str(exc))}")
    except InvalidHandshake as exc:
        failure = HandshakeError(f"{redacted}: {redact(str(exc))}")
    except OSError as exc:
        failure = ConnectionError(f"{redacted}: {exc.strerror or exc}")
    raise failure  # outside the except clauses: no context holding the URL is chained


def passing(refusal: HandshakeError) -> bool:
    """Whether a refused reconnect may succeed later: a status of RECONNECT_RETRIED_HTTP_STATUSES
    (a timeout, too many requests, a gateway restarting or overloaded: spec decision
    reconnect-retried-statuses); retried like a TCP refusal until the window closes."""
    return refusal.status in RECONNECT_RETRIED_HTTP_STATUSES


def refusal(exc: InvalidStatus) -> HandshakeError:
    """The HTTP answer that refused the upgrade, with the OVP code its JSON body names."""
    response = exc.response
    code: str | None = None
    with contextlib.suppress(ValueError, LookupError, TypeError):
        code = str(json.loads(response.body)["code"])
    return HandshakeError(
        f"the gateway answered HTTP {response.status_code}" + (f" ({code})" if code else ""),
        status=response.status_code,
        code=code,
    )
