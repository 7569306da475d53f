"""The actions a sans-I/O protocol core returns to its adapter.

A core (``voxwire.brisvox.engine_core``, ``voxwire.ovp.client_core``,
``voxwire.ovp.gateway_core``) takes what arrived (a text or binary message, the time) and returns a
list of actions; it never touches a socket, a task or a clock. The asyncio adapter performs the
actions in order: it writes, closes, and hands events to the application. Each protocol adds its
own event types; these are the actions every core shares.

The two writes are frozen ``msgspec.Struct`` classes, not frozen dataclasses: one is built for
every message a link writes, and a Struct is built in a fifth of the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import msgspec

__all__ = ["Action", "Close", "DownCause", "Ignored", "LinkDown", "SendBinary", "SendText"]


class SendText(msgspec.Struct, frozen=True):
    """Write one text message (already encoded, UTF-8 JSON)."""

    data: bytes


class SendBinary(msgspec.Struct, frozen=True):
    """Write one binary message."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """Close the WebSocket with ``code`` and ``reason`` (after the sends before it)."""

    code: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Ignored:
    """Input the protocol says to drop without an answer (logged at DEBUG and counted, never
    silent); one class for both protocols' cores."""

    what: str
    code: str | None = None
    """The protocol's error code when the input broke a rule the receiver tolerates (the
    sender's fault: ``voxwire validate`` reports it), ``None`` when the protocol allows it."""


Action = SendText | SendBinary | Close
"""What every core may ask its adapter to do; protocol cores add event types of their own."""


class DownCause(Enum):
    """Why a link went down, as its writer (:class:`voxwire.link.Link`) saw it."""

    DRAIN_TIMEOUT = "drain_timeout"
    """What was queued could not be written within the drain timeout."""
    SILENCE = "silence"
    """Nothing (no frame, no pong) was heard for the keepalive's silence timeout."""
    CLOSED = "closed"
    """The connection closed under the writer."""
    OVERFLOW = "overflow"
    """The control queue passed its bound: the peer is not reading."""
    WRITER_FAILED = "writer_failed"
    """The writer raised an unexpected error (logged with its traceback)."""
    ABORTED = "aborted"
    """The role took the link down (:meth:`voxwire.link.Link.abort`)."""


@dataclass(frozen=True, slots=True)
class LinkDown:
    """A link went down (the one word for a connection that is gone): why, in words, and what
    follows.

    The link's writer reports it with its ``cause``; the Brisvox engine's core with
    ``reconnect_in``, the seconds until the next attempt (None: the call goes on without the
    agent); a Brisvox agent's call that ends without ``session.end`` ends with one.
    """

    reason: str
    reconnect_in: float | None = None
    """Seconds until the next connection attempt; None when none follows."""
    cause: DownCause | None = None
    """Why, when the link's writer took it down (None when a core or a session reports it)."""
