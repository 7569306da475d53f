"""How the engine side's core writes and reads the wire. Not public:
:mod:`voxwire.brisvox.engine_core` is.

Every message the engine writes is checked and encoded when it is made, in the caller's call,
with the widest envelope (:func:`queue_form`); ``EngineCore.stamp`` writes the real ``seq`` and
``t_ms`` in its place as the link's writer takes it (spec decision
seq-stamped-after-the-check). An event is a :class:`SendEvent`, which the link may drop; an
``events.lost`` is a :class:`LostReport`, which says how many drops it reports; what became of
the events handed to one link is an :class:`EventCount`. The agent's first answer is read
leniently (:func:`read_answer`): what the spec lets the engine leave out is left out and
reported, and the call goes on. A message that broke a rule is answered as the spec says
(:func:`refused`, :func:`reported`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import msgspec

from voxwire._decode_errors import field_of_refused, without_item
from voxwire._rules import JSON_SAFE_INTEGER
from voxwire.brisvox.codec import decoder, encode
from voxwire.brisvox.constants import RESERVED_TOOL_NAMES, CloseCode
from voxwire.brisvox.errors import ErrorCode, ProtocolError
from voxwire.brisvox.messages import (
    COMMAND_TYPES,
    Command,
    CommandError,
    CommandResult,
    ErrorEvent,
    ErrorStage,
    ServerMessage,
    SessionAccept,
    SessionReject,
    ToolResult,
)
from voxwire.brisvox.outputs import BadMessage, refusal_text
from voxwire.sansio import Close, SendText

__all__ = [
    "DECODE_AGENT",
    "WIDEST",
    "EventCount",
    "LostReport",
    "SendEvent",
    "control",
    "error_event",
    "queue_form",
    "read_answer",
    "refused",
    "reported",
]

DECODE_AGENT: Final = decoder("agent")
"""Decodes what the agent sends (built once)."""

WIDEST: Final = b',"seq":%d,"t_ms":%d' % (JSON_SAFE_INTEGER, JSON_SAFE_INTEGER)
"""The envelope every message is encoded with until it is stamped (never shorter than the real
one)."""

_ITEM_PATH: Final = re.compile(r"\$\.(tools|events|context)\[(\d+)\]")


class SendEvent(SendText, frozen=True):
    """Write one event (already encoded): the link may drop it when its event queue is full,
    and reports the gap as ``events.lost``. Control messages are plain ``SendText``."""


class LostReport(SendText, frozen=True):
    """An ``events.lost`` for ``count`` events the link dropped (counted as it is written)."""

    count: int = 0


@dataclass(slots=True)
class EventCount:
    """What became of the events handed to one link."""

    handed: int = 0
    written: int = 0
    reported: int = 0
    """Dropped by the link's queue and reported in an events.lost written on it."""

    @property
    def unaccounted(self) -> int:
        """Handed but neither written nor reported: queued when the link went down."""
        return max(0, self.handed - self.written - self.reported)


def queue_form(message: ServerMessage) -> bytes:
    """``message`` checked and encoded with the widest envelope, which ``EngineCore.stamp``
    replaces by the real one (never longer). Raises ProtocolError."""
    if message.seq != JSON_SAFE_INTEGER or message.t_ms != JSON_SAFE_INTEGER:  # not built so
        message = msgspec.structs.replace(message, seq=JSON_SAFE_INTEGER, t_ms=JSON_SAFE_INTEGER)
    return encode(message)


def control(message: ServerMessage) -> SendText:
    """A control message (never dropped) in its queue form."""
    return SendText(queue_form(message))


def error_event(message: str) -> ErrorEvent:
    """An ``error`` event of the agent link's stage, not fatal: how the engine tells the agent
    of a rule it broke."""
    return ErrorEvent(seq=0, t_ms=0, stage=ErrorStage.AGENT_LINK, message=message, fatal=False)


def read_answer(
    data: bytes | str,
) -> tuple[SessionAccept | SessionReject | Command | ToolResult, list[str]]:
    """Decode the agent's first message; an accept's refused tools, unknown event types and
    empty context messages are left out and reported (the call goes on), as are tools of a
    reserved name. Raises ProtocolError for anything else."""
    problems: list[str] = []
    while True:
        try:
            message = DECODE_AGENT(data)
        except ProtocolError as exc:
            found = _ITEM_PATH.match(exc.path or "")
            if exc.message_type != SessionAccept.type or found is None:
                raise
            rest = without_item(data, found.group(1), int(found.group(2)))
            if rest is None:
                raise
            problems.append(refusal_text(exc))
            data = rest
            continue
        if isinstance(message, SessionAccept):
            reserved = [t for t in message.tools if t.name in RESERVED_TOOL_NAMES]
            for tool in reserved:
                problems.append(f"invalid_argument: tool name {tool.name!r} is reserved")
            if reserved:
                message = msgspec.structs.replace(
                    message,
                    tools=[t for t in message.tools if t.name not in RESERVED_TOOL_NAMES],
                )
        return message, problems


def reported(error: ProtocolError) -> list[SendText | BadMessage]:
    """A rule the agent broke, told to it in an ``error`` event and to the application."""
    return [control(error_event(refusal_text(error))), BadMessage(error, answered=True)]


def refused(exc: ProtocolError, data: bytes | str) -> list[SendText | Close | BadMessage]:
    """Answer a message that broke the protocol: too large closes the link; a command with a
    valid id gets a failed command.result; anything else an error event (the spec's
    decision refused-command-bad-id)."""
    if exc.code is ErrorCode.TOO_LARGE and exc.message_type is None:
        return [Close(CloseCode.TOO_LARGE, "message too large"), BadMessage(exc, answered=True)]
    if exc.message_type in COMMAND_TYPES:
        command_id = field_of_refused(data, "id")
        try:  # the id must pass the id rule to be echoed
            result = CommandResult(
                seq=0,
                t_ms=0,
                id=command_id,
                ok=False,
                error=CommandError(code=exc.code, message=refusal_text(exc)),
            )
            return [control(result), BadMessage(exc, answered=True)]
        except ProtocolError:
            pass
    return [*reported(exc)]
