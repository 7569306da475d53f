"""What a protocol's per-session statistics read: the types of the generated tables.

Each spec says, in its ``statistics:`` section (docs/spec-format.md, Statistics), which message
ends the user's turn and which answers it, which starts a tool call and which ends it (with the
field carrying the call's key), which resumes the session, which counts lost events, and which
frame fields count and stamp the audio. ``python -m codegen generate`` prints that as one
:class:`Marks` per protocol, ``voxwire.brisvox.statistics.STATISTICS`` and
``voxwire.ovp.statistics.STATISTICS``; :class:`voxwire.observe.stats.SessionStats` reads it and
knows no protocol by name. Fields are named by their Python attribute (``from_`` for ``from``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgspec

__all__ = [
    "FrameMarks",
    "LossMark",
    "Mark",
    "Marks",
    "OutcomeMark",
    "ResumeMark",
    "ToolCallMark",
    "When",
]

_UNSET: Final = msgspec.UNSET


@dataclass(frozen=True, slots=True)
class When:
    """A condition on one field of a message: it equals ``equals``, or it is (``present=True``)
    or is not (``present=False``) on the wire; a null counts as present."""

    field: str
    equals: str | int | bool | None = None
    present: bool | None = None

    def holds(self, message: Any) -> bool:
        """Whether ``message`` meets the condition."""
        value = getattr(message, self.field, _UNSET)
        if self.present is not None:
            return (value is not _UNSET) is self.present
        if isinstance(value, bool) or isinstance(self.equals, bool):
            return value is self.equals  # True is no 1 here
        return bool(value == self.equals)


def _matches(wire_type: str, when: When | None, message: Any) -> bool:
    return bool(message.type == wire_type) and (when is None or when.holds(message))


@dataclass(frozen=True, slots=True)
class Mark:
    """A message type that marks a moment of the session, when its condition holds."""

    type: str
    when: When | None = None

    def matches(self, message: Any) -> bool:
        """Whether ``message`` is of this type and meets the condition."""
        return _matches(self.type, self.when, message)


@dataclass(frozen=True, slots=True)
class ToolCallMark:
    """The message that starts a tool call: ``key`` identifies the call, ``name`` is the tool's."""

    type: str
    key: str
    name: str


@dataclass(frozen=True, slots=True)
class OutcomeMark:
    """A message that ends the tool call whose key its ``key`` field carries, with ``outcome``
    (``ok``, ``error``, ``cancelled``); ``duration_ms`` is a field in which it states the call's
    duration itself, if it has one."""

    type: str
    key: str
    outcome: str
    when: When | None = None
    duration_ms: str | None = None

    def matches(self, message: Any) -> bool:
        """Whether ``message`` is of this type and meets the condition."""
        return _matches(self.type, self.when, message)


@dataclass(frozen=True, slots=True)
class ResumeMark:
    """The message that resumes the session on a new link. ``replayed_before``: a datetime field
    of the resume and of the other side's messages; one of theirs after the resume that was made
    before it was replayed."""

    type: str
    when: When | None = None
    replayed_before: str | None = None

    def matches(self, message: Any) -> bool:
        """Whether ``message`` is of this type and meets the condition."""
        return _matches(self.type, self.when, message)


@dataclass(frozen=True, slots=True)
class LossMark:
    """The message that says ``count`` events never reached their receiver."""

    type: str
    count: str


@dataclass(frozen=True, slots=True)
class FrameMarks:
    """The audio frames: the header fields that count them and stamp them on the media clock
    (each modulo its size), the mask of the silence flag, and the milliseconds one carries."""

    sequence: str
    sequence_modulus: int
    clock: str
    clock_modulus: int
    flags: str
    """The header field whose bits hold the silence flag."""
    silence_mask: int
    duration_ms: int


@dataclass(frozen=True, slots=True)
class Marks:
    """What one protocol's statistics read (generated from its spec: never written by hand)."""

    protocol: str
    senders: tuple[str, str]
    """The protocol's two senders, in the spec's order."""
    sequence: str | None
    """The envelope field numbering a sender's messages, if one."""
    sequenced: frozenset[str]
    """The senders whose messages carry ``sequence``."""
    frames: FrameMarks | None
    turn_end: tuple[Mark, ...]
    turn_output: tuple[Mark, ...]
    tool_call: ToolCallMark
    tool_outcomes: tuple[OutcomeMark, ...]
    """The first that matches a message wins."""
    resume: ResumeMark | None
    loss_report: LossMark | None
