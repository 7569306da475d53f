"""The one exception hierarchy of voxwire, for both protocols.

Every error voxwire raises on purpose is a :class:`VoxwireError`, so one ``except`` catches them
all; each also derives from the built-in exception its kind of failure has always had, so code
written against those keeps working:

```text
VoxwireError
├── ProtocolError            a message or frame breaks its protocol (one subclass per protocol,
│                            code = the protocol's error code)
├── ConfigError (ValueError) bad configuration, found at startup (an insecure URL, a CA bundle,
│                            a TOML section, a gateway setting)
├── HandshakeError           the peer refused the session or the handshake failed
├── SessionStateError (RuntimeError)
│                            a call the session's state does not allow (its role's table refuses it)
└── SessionClosed (ConnectionError)
                             nothing can be sent now: the session's link is closed, parked or
                             down
```

Each role adds the errors only it has under these (``brisvox.agent.CommandFailed``,
``ovp.client.SessionFailed``...), and so do the tools and the cluster, each keeping its built-in
base (``capture.CaptureError``, ``conformance.VectorError`` and ``audio.AudioError`` are
ValueErrors, ``cluster.StoreUnavailable`` and ``cluster.relay.RelayFailed`` ConnectionErrors;
also ``demo.DemoFailed``, ``cli.CommandError``).

```python
from voxwire import brisvox
from voxwire.errors import ProtocolError, VoxwireError

try:
    brisvox.decode('{"type": "say", "text": ""}', "agent")
except ProtocolError as exc:
    assert isinstance(exc, VoxwireError) and exc.code == "invalid_argument"
```
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "HandshakeError",
    "ProtocolError",
    "SessionClosed",
    "SessionStateError",
    "VoxwireError",
]


class VoxwireError(Exception):
    """The base of every error voxwire raises on purpose."""


class ProtocolError(VoxwireError):
    """A message or frame that breaks its protocol.

    Each protocol has its own subclass (``voxwire.brisvox.ProtocolError``,
    ``voxwire.ovp.ProtocolError``) whose ``code`` is one of that protocol's error codes.

    Attributes:
        code: The protocol's own error code (``bad_message``, ``OVP_EVENT_SCHEMA_INVALID``, ...).
        detail: What was wrong, in one sentence.
        path: Where: a JSON path such as ``$.context[3].text``, or ``None`` for the whole input.
        message_type: The message's wire ``type`` when it was known, else ``None``.
    """

    code: str
    detail: str
    path: str | None
    message_type: str | None

    def __init__(
        self,
        code: str,
        detail: str,
        *,
        path: str | None = None,
        message_type: str | None = None,
    ) -> None:
        self.code = code
        self.detail = detail
        self.path = path
        self.message_type = message_type
        where = " ".join(part for part in (message_type, path) if part)
        super().__init__(f"{code}: {where}: {detail}" if where else f"{code}: {detail}")

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.code, self.detail, self.path, self.message_type))


class ConfigError(VoxwireError, ValueError):
    """The configuration is wrong; the message names the setting. Raised at startup."""


class HandshakeError(VoxwireError):
    """The peer refused the session, or the handshake failed; the message says how (and never
    holds a token).

    Attributes:
        status: The HTTP status of an answer that refused the WebSocket upgrade (101 when the
            upgrade succeeded but the subprotocol did not), or ``None``.
        code: The protocol's error code the peer named (``OVP_SUBPROTOCOL_MISMATCH``...), or
            ``None``.
    """

    status: int | None
    code: str | None

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_handshake, (type(self), str(self), self.status, self.code))


class SessionClosed(VoxwireError, ConnectionError):
    """Nothing can be sent now: the session's link is closed, parked or down."""


class SessionStateError(VoxwireError, RuntimeError):
    """A call the session's state does not allow (sending before the start or after the end):
    an input the role's table (``voxwire.machine``) has no transition for."""


def _rebuild(
    cls: type[ProtocolError], code: str, detail: str, path: str | None, message_type: str | None
) -> ProtocolError:
    return cls(code, detail, path=path, message_type=message_type)


def _rebuild_handshake(
    cls: type[HandshakeError], message: str, status: int | None, code: str | None
) -> HandshakeError:
    return cls(message, status=status, code=code)
