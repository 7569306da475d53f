"""What both Brisvox cores share: the outputs neither side owns, what the agent's iteration says
of the events it dropped, and the one way a refusal's text is cut to fit a reply.

The agent side's core is :mod:`voxwire.brisvox.agent_core`, the engine side's
:mod:`voxwire.brisvox.engine_core`; each returns these beside its own events.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxwire.brisvox.constants import MAX_REFUSAL_BYTES
from voxwire.brisvox.errors import ProtocolError
from voxwire.brisvox.messages import SessionReject
from voxwire.errors import VoxwireError

__all__ = [
    "BadMessage",
    "CommandFailed",
    "EventsDropped",
    "HandshakeFailed",
    "refusal_text",
]


@dataclass(frozen=True, slots=True)
class HandshakeFailed:
    """The handshake did not succeed; the link is (being) closed.

    ``final`` is false on the engine side when another reconnection attempt follows.
    """

    reason: str
    rejected: SessionReject | None = None
    final: bool = True


@dataclass(frozen=True, slots=True)
class BadMessage:
    """The peer sent something that breaks the protocol; ``answered`` says if the core replied."""

    error: ProtocolError
    answered: bool


class CommandFailed(VoxwireError):
    """A command answered ``ok: false``; ``code`` is the protocol's code.

    The agent side raises it when the engine refused a command; an engine-side handler
    (``EngineLink.on("transfer", ...)``) raises it to refuse one.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def refusal_text(error: ProtocolError) -> str:
    """``error`` as the ``"<code>: <text>"`` a refusal carries, cut to ``MAX_REFUSAL_BYTES``
    UTF-8 bytes, so the reply always fits: the text may quote a rejected value, and a lone
    surrogate in it (a ``\\ud800`` escape in the input) becomes ``?``."""
    text = "".join("?" if "\ud800" <= c <= "\udfff" else c for c in str(error))
    data = text.encode()
    if len(data) <= MAX_REFUSAL_BYTES:
        return text
    return data[: MAX_REFUSAL_BYTES - 3].decode("utf-8", "ignore") + "..."


@dataclass(frozen=True, slots=True)
class EventsDropped:
    """``count`` events were dropped by a full inbox (the application fell behind); delivered
    where the gap is (:class:`voxwire.session.Inbox`)."""

    count: int
