"""The agent's remote tools: :class:`Tool`, what a running one knows (:class:`ToolContext`), and
how a call runs them (:class:`Tools`).

Each ``tool.call`` runs as its own task. A ``tool.cancel`` or a lost link sets
:attr:`ToolContext.cancelled`; a read_only tool is cancelled then, a side_effect one gets the
side-effect grace to finish (its result would be dropped, its effect may still be wanted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, assert_never

from voxwire.brisvox.agent_core import (
    CommandAnswered,
    CommandTimedOut,
    EventReceived,
    StartReceived,
    ToolCallCancelled,
    ToolCallStarted,
)
from voxwire.brisvox.constants import LINK_CLOSED_REASON
from voxwire.brisvox.messages import ToolCall, ToolDeclaration, ToolKind
from voxwire.brisvox.outputs import BadMessage, HandshakeFailed
from voxwire.clock import Clock
from voxwire.errors import SessionClosed, VoxwireError
from voxwire.sansio import Close, Ignored, SendText

if TYPE_CHECKING:
    from voxwire.brisvox.agent_session import AgentLink, AgentSession

__all__ = ["Tool", "ToolContext", "ToolError", "Tools"]

log = logging.getLogger("voxwire.brisvox.agent")


class ToolError(VoxwireError):
    """Raise from a tool to fail it with this text as the error the LLM gets."""


@dataclass(slots=True)
class ToolContext:
    """What a running tool knows: its call, its session, and whether the server stopped waiting."""

    call: ToolCall
    session: AgentSession
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set on ``tool.cancel`` or a lost link; a read_only tool is also cancelled then."""
    cancel_reason: str | None = None
    """The ``tool.cancel`` reason, or ``link_closed``."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A remote tool: its declaration and the coroutine that runs it.

    ``run`` returns any JSON value (the result) or raises :class:`ToolError` (the error text);
    another exception fails the call with its type name only.
    """

    declaration: ToolDeclaration
    run: Callable[[ToolContext], Awaitable[object]]


class Tools:
    """The tools running for one call, each a task tracked in ``tasks``."""

    def __init__(
        self,
        tools: Mapping[str, Tool],
        clock: Clock,
        side_effect_grace: float,
        tasks: set[asyncio.Task[Any]],
    ) -> None:
        self.tools = tools
        self.clock = clock
        self.side_effect_grace = side_effect_grace
        self.tasks = tasks
        self.running: dict[int, tuple[asyncio.Task[None], ToolContext]] = {}
        """The calls running now, by call id."""

    def start(self, session: AgentSession, link: AgentLink, call: ToolCall) -> None:
        """Run ``call`` as its own task; its answer goes out on ``link``."""
        ctx = ToolContext(call, session)
        task = self._spawn(self._run(link, ctx), f"brisvox-tool-{call.name}-{call.id}")
        self.running[call.id] = (task, ctx)
        task.add_done_callback(lambda _: self.running.pop(call.id, None))

    def cancel(self, cancel: ToolCallCancelled) -> None:
        """The server stopped waiting: tell the tool; a read_only one stops now."""
        entry = self.running.get(cancel.call.id)
        if entry is None:
            return
        task, ctx = entry
        ctx.cancel_reason = cancel.reason
        ctx.cancelled.set()
        if cancel.call.kind is ToolKind.READ_ONLY:
            task.cancel()

    def link_closed(self) -> None:
        """The link is gone: running tools hear ``link_closed``; read_only tools stop now,
        side_effect ones get ``side_effect_grace`` to finish."""
        for task, ctx in list(self.running.values()):
            ctx.cancel_reason = ctx.cancel_reason or LINK_CLOSED_REASON
            ctx.cancelled.set()
            if ctx.call.kind is ToolKind.READ_ONLY:
                task.cancel()
            else:
                self._spawn(self._cancel_later(task), "brisvox-tool-grace")

    async def _run(self, link: AgentLink, ctx: ToolContext) -> None:
        call = ctx.call
        tool = self.tools.get(call.name)
        answer: dict[str, Any]
        if tool is None:
            answer = {"error": f"unknown tool {call.name!r}"}
        else:
            try:
                answer = {"result": await tool.run(ctx)}
            except asyncio.CancelledError:
                if ctx.cancelled.is_set():
                    log.debug("tool %s (%d) cancelled: %s", call.name, call.id, ctx.cancel_reason)
                    return
                raise
            except ToolError as exc:
                answer = {"error": str(exc) or "tool failed"}
            except Exception as exc:
                log.exception("tool %s (%d) failed", call.name, call.id)
                answer = {"error": f"tool failed: {type(exc).__name__}"}
        for out in link.core.answer_tool(call.id, self.clock.now(), **answer):
            match out:
                case SendText():
                    with contextlib.suppress(SessionClosed):
                        link.queue(out)
                case BadMessage(error=error):
                    log.warning("tool %s (%d): %s; sent as an error", call.name, call.id, error)
                case Ignored(what=what):
                    log.debug("tool %s (%d): %s", call.name, call.id, what)
                case (
                    Close()
                    | StartReceived()
                    | HandshakeFailed()
                    | EventReceived()
                    | ToolCallStarted()
                    | ToolCallCancelled()
                    | CommandAnswered()
                    | CommandTimedOut()
                ):
                    raise AssertionError(f"{out!r} in answer to a tool call")
                case _:
                    assert_never(out)

    async def _cancel_later(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.clock.real_seconds(self.side_effect_grace)):
                await asyncio.shield(task)
        task.cancel()

    def _spawn(self, coro: Awaitable[None], name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        task.set_name(name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task
