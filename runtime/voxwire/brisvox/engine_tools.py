"""The remote tool calls of the engine side, sans-I/O: what the agent declared, which calls wait
for their result, their deadlines, and how each ends.

:class:`ToolCalls` is the ledger of one phone call's calls (one per
:class:`~voxwire.brisvox.engine_core.EngineCore`, across its links); it numbers each call (ids
never repeat within a call), writes its ``tool.call`` and ``tool.cancel``, and says how it ended
(:class:`ToolFinished`, with a :class:`ToolOutcome`): a result or a tool error from the agent, a
read_only call abandoned at its ``timeout_ms``, a side_effect call overdue there
(:class:`ToolOverdue`, still waited for) and of unknown outcome ``side_effect_wait`` later, every
call failed when its link is lost.

Every name here is importable from :mod:`voxwire.brisvox.engine_core` too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeAlias

from voxwire.brisvox._engine_wire import control
from voxwire.brisvox.engine_settings import LinkSettings
from voxwire.brisvox.errors import ErrorCode
from voxwire.brisvox.messages import (
    ToolCall,
    ToolCancel,
    ToolCancelReason,
    ToolDeclaration,
    ToolKind,
    ToolResult,
)
from voxwire.sansio import Ignored, SendText

__all__ = [
    "ToolCallQueued",
    "ToolCalls",
    "ToolFinished",
    "ToolOutcome",
    "ToolOutput",
    "ToolOverdue",
    "idempotency_key",
]


def idempotency_key(session_id: str, call_id: str) -> str:
    """16 hex digits, stable for one tool call of one phone call."""
    return hashlib.sha256(f"{session_id}\0{call_id}".encode()).hexdigest()[:16]


class ToolOutcome(StrEnum):
    """How a remote tool call ended, as the engine gives it to the LLM."""

    RESULT = "result"
    TOOL_FAILED = "tool_failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    UNKNOWN_TOOL = "unknown_tool"
    OUTCOME_UNKNOWN = ErrorCode.OUTCOME_UNKNOWN.value


@dataclass(frozen=True, slots=True)
class ToolCallQueued:
    """A tool call is waiting for its result."""

    request_id: int
    call_id: str


@dataclass(frozen=True, slots=True)
class ToolOverdue:
    """A side_effect call passed its timeout_ms: the LLM gets a timeout, the link keeps waiting."""

    request_id: int
    call_id: str


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """A tool call ended (``late`` for a side_effect result after its timeout_ms)."""

    request_id: int
    call_id: str
    outcome: ToolOutcome
    result: Any = None
    error: str | None = None
    late: bool = False
    message: ToolResult | None = field(default=None, compare=False)
    """The agent's tool.result, when it came from the agent."""


ToolOutput: TypeAlias = SendText | ToolCallQueued | ToolOverdue | ToolFinished | Ignored
"""What :class:`ToolCalls` returns: the ``tool.call`` and ``tool.cancel`` to write (control
messages), and what became of the calls."""


@dataclass(slots=True)
class _Waiting:
    call: ToolCall
    deadline: float
    overdue: bool = False


class ToolCalls:
    """The tool calls of one phone call, across its links.

    Args:
        session_id: The call's id (each call's idempotency key is made from it).
        settings: The link's bounds (``max_waiting_tools``, ``side_effect_wait``).
    """

    def __init__(self, session_id: str, settings: LinkSettings) -> None:
        self._session_id = session_id
        self._settings = settings
        self._waiting: dict[int, _Waiting] = {}
        self._declared: dict[str, ToolDeclaration] = {}
        self._next_id = 1

    @property
    def waiting(self) -> int:
        """Tool calls waiting for a result."""
        return len(self._waiting)

    def declare(self, tools: Iterable[ToolDeclaration]) -> None:
        """The tools the agent offers (its first accept's: they stay across resumptions)."""
        self._declared = {t.name: t for t in tools}

    def call(
        self, name: str, arguments: dict[str, Any], *, call_id: str, epoch: int, now: float
    ) -> list[ToolOutput]:
        """Ask the agent to run a tool it declared, on the open link: ``[tool.call, queued]``,
        or at once how it ended (not offered, too many waiting).

        Raises ProtocolError (nothing queued, no id used) when the call breaks a rule.
        """
        declaration = self._declared.get(name)
        if declaration is None:
            return [
                self.finished_now(call_id, ToolOutcome.UNKNOWN_TOOL, f"{name!r} is not offered")
            ]
        limit = self._settings.max_waiting_tools
        if len(self._waiting) >= limit:
            return [
                self.finished_now(
                    call_id, ToolOutcome.TOOL_FAILED, f"{limit} tool calls are already waiting"
                )
            ]
        request_id = self._next_id
        call = ToolCall(
            seq=0,
            t_ms=0,
            id=request_id,
            call_id=call_id,
            name=name,
            arguments=arguments,
            kind=declaration.kind,
            epoch=epoch,
            idempotency_key=idempotency_key(self._session_id, call_id),
            timeout_ms=declaration.timeout_ms,
        )
        frame = control(call)
        self._next_id += 1
        self._waiting[request_id] = _Waiting(call, now + declaration.timeout_ms / 1000)
        return [frame, ToolCallQueued(request_id, call_id)]

    def finished_now(self, call_id: str, outcome: ToolOutcome, why: str) -> ToolFinished:
        """A call that ends before it is made (it gets an id all the same)."""
        request_id = self._next_id  # never used again: ids never repeat within a call
        self._next_id += 1
        return ToolFinished(request_id, call_id, outcome, error=why)

    def cancel(self, request_id: int, reason: ToolCancelReason) -> list[ToolOutput]:
        """Stop waiting for a read_only call (a barge-in); for a side_effect call the cancel is
        advice and the link keeps waiting for its late result."""
        waiting = self._waiting.get(request_id)
        if waiting is None:
            return [Ignored(f"cancel of tool call {request_id}, which is not waiting")]
        cancel = _cancel(request_id, reason)
        if waiting.call.kind is ToolKind.SIDE_EFFECT:
            return [cancel]
        del self._waiting[request_id]
        outcome = (
            ToolOutcome.INTERRUPTED
            if reason is ToolCancelReason.INTERRUPTED
            else ToolOutcome.TIMEOUT
        )
        return [cancel, ToolFinished(request_id, waiting.call.call_id, outcome)]

    def result(self, result: ToolResult) -> ToolFinished | None:
        """The agent's ``tool.result``: how its call ended, or None when no call waits for it
        (late or unknown)."""
        waiting = self._waiting.pop(result.id, None)
        if waiting is None:
            return None
        call_id, late = waiting.call.call_id, waiting.overdue
        if isinstance(result.error, str):
            return ToolFinished(
                result.id,
                call_id,
                ToolOutcome.TOOL_FAILED,
                error=result.error,
                late=late,
                message=result,
            )
        return ToolFinished(
            result.id, call_id, ToolOutcome.RESULT, result.result, late=late, message=result
        )

    def due(self, now: float) -> list[ToolOutput]:
        """The deadlines passed by ``now``: a read_only call is abandoned, a side_effect call is
        overdue, then of unknown outcome ``side_effect_wait`` later."""
        out: list[ToolOutput] = []
        for request_id, waiting in list(self._waiting.items()):
            if now < waiting.deadline:
                continue
            call = waiting.call
            if call.kind is ToolKind.READ_ONLY:
                del self._waiting[request_id]
                out.append(_cancel(request_id, ToolCancelReason.ABANDONED))
                out.append(ToolFinished(request_id, call.call_id, ToolOutcome.TIMEOUT))
            elif not waiting.overdue:
                waiting.overdue = True
                waiting.deadline += self._settings.side_effect_wait
                out.append(ToolOverdue(request_id, call.call_id))
            else:
                del self._waiting[request_id]
                out.append(_cancel(request_id, ToolCancelReason.TIMEOUT))
                out.append(ToolFinished(request_id, call.call_id, ToolOutcome.OUTCOME_UNKNOWN))
        return out

    def fail_all(self, why: str) -> list[ToolFinished]:
        """Every waiting call ends (its link is lost, the call ended): a side_effect call's
        outcome is unknown, a read_only call failed."""
        out: list[ToolFinished] = []
        for request_id, waiting in self._waiting.items():
            call = waiting.call
            outcome = (
                ToolOutcome.OUTCOME_UNKNOWN
                if call.kind is ToolKind.SIDE_EFFECT
                else ToolOutcome.TOOL_FAILED
            )
            out.append(ToolFinished(request_id, call.call_id, outcome, error=why))
        self._waiting.clear()
        return out

    def next_deadline(self) -> float | None:
        """The earliest deadline of a waiting call, or None."""
        return min((w.deadline for w in self._waiting.values()), default=None)


def _cancel(request_id: int, reason: ToolCancelReason) -> SendText:
    return control(ToolCancel(seq=0, t_ms=0, id=request_id, reason=reason))
