"""A harness that plays a call to an agent under test, through the real engine side.

```text
async with AgentCall.open("ws://127.0.0.1:8765", token="s3cret") as call:
    assert "book_table" in call.tools
    call.user_says("When do you open?")
    say = await call.expect(brisvox.Say)            # answered ok, like the engine does
    result = await call.tool("book_table", time="19:00")
    call.barge_in()
    await call.hang_up()
assert [type(c).__name__ for c in call.sent] == ["Say"]
```

Every command the agent sends is recorded in :attr:`AgentCall.sent` and answered (ok, or the
failure :attr:`AgentCall.refuse` names for its type); link changes land in
:attr:`AgentCall.notices`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar

from voxwire.brisvox.engine import AgentTarget, EngineLink, PendingTool
from voxwire.brisvox.engine_core import (
    AgentAccepted,
    CommandReceived,
    LinkDown,
    LinkSettings,
    ToolFinished,
    ToolOverdue,
)
from voxwire.brisvox.messages import (
    CallIdentity,
    Capabilities,
    Command,
    Event,
    SessionAccept,
    SessionEndReason,
    ToolDeclaration,
)
from voxwire.brisvox.outputs import HandshakeFailed
from voxwire.capture import Record
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.errors import HandshakeError
from voxwire.hosts import check_url

__all__ = ["AgentCall", "AgentRefused"]

C = TypeVar("C", bound=Command)

WAIT: float = 5.0
"""Default real seconds :meth:`AgentCall.expect` waits."""


class AgentRefused(HandshakeError, AssertionError):
    """The agent did not take the call (it rejected it, or the handshake failed)."""


class AgentCall:
    """One call played to an agent: events in, the agent's commands and tool results out."""

    def __init__(self, link: EngineLink, refuse: Mapping[str, tuple[str, str]]) -> None:
        self.link = link
        self.refuse = dict(refuse)
        """Command types to answer with a failure: ``{"transfer": ("unsupported", "...")}``."""
        self.sent: list[Command] = []
        """Every command the agent sent, in order."""
        self.notices: list[ToolOverdue | AgentAccepted | HandshakeFailed | LinkDown] = []
        """The link's changes after the handshake (resumptions, losses)."""
        self.epoch = 0
        """The call's current turn number."""
        self._seen = 0
        self._arrived = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._tool_calls = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        url: str,
        *,
        token: str | None = None,
        session_id: str = "test-call",
        agent: str = "test",
        capabilities: Capabilities | None = None,
        call: CallIdentity | None = None,
        settings: LinkSettings | None = None,
        refuse: Mapping[str, tuple[str, str]] | None = None,
        allow_insecure: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        record: Record = None,
    ) -> AsyncIterator[AgentCall]:
        """Connect to the agent at ``url`` and handshake; raise :class:`AgentRefused` when it
        does not take the call. The call is closed on exit (without ``session.end`` unless
        :meth:`hang_up` ran). ``record`` records it, as ``EngineLink``'s option."""
        target = AgentTarget(
            check_url(url, allow_insecure=allow_insecure), token, caller_identity=call is not None
        )
        link = EngineLink(
            target,
            session_id=session_id,
            agent=agent,
            capabilities=capabilities,
            call=call,
            settings=settings,
            clock=clock,
            record=record,
        )
        played = cls(link, refuse or {})
        try:
            if not await link.start():
                notice = await link.next_notice()
                raise AgentRefused(f"the agent did not take the call: {notice}")
            played._pump = asyncio.ensure_future(played._read())
            yield played
        finally:
            if played._pump is not None:
                played._pump.cancel()
                await asyncio.gather(played._pump, return_exceptions=True)
            await link.close()

    # -- what the agent declared ----------------------------------------------------------------

    @property
    def accept(self) -> SessionAccept:
        """The agent's ``session.accept``."""
        assert self.link.accept is not None
        return self.link.accept

    @property
    def tools(self) -> dict[str, ToolDeclaration]:
        """The agent's tools by name."""
        return {tool.name: tool for tool in self.accept.tools}

    # -- playing the call -----------------------------------------------------------------------

    def event(self, event: Event) -> None:
        """Send one event given as a message object (its seq and t_ms are the link's); the
        helpers below, and ``call.link.send_<type>(...)``, send by fields."""
        self.link.send_event(event)

    def user_says(self, text: str) -> None:
        """A user turn: it starts, its final transcript, it ends, its text."""
        self.epoch += 1
        link, epoch = self.link, self.epoch
        link.send_turn_user_started(epoch=epoch)
        link.send_user_transcript(text=text, final=True)
        link.send_turn_user_ended(epoch=epoch)
        link.send_user_text(epoch=epoch, text=text)

    def bot_says(self, text: str) -> None:
        """A whole bot response in the current epoch."""
        link, epoch = self.link, self.epoch
        link.send_bot_llm_started(epoch=epoch)
        link.send_bot_text(epoch=epoch, text=text)
        link.send_bot_llm_stopped(epoch=epoch)
        link.send_bot_tts_text(epoch=epoch, text=text)
        link.send_bot_tts_stopped(epoch=epoch)
        link.send_turn_bot_started(epoch=epoch)
        link.send_turn_bot_ended(epoch=epoch)

    def barge_in(self) -> None:
        """The caller talks over the bot: a new epoch, interrupted, and a user turn starts."""
        self.epoch += 1
        self.link.send_turn_interrupted(epoch=self.epoch)
        self.link.send_turn_user_started(epoch=self.epoch)

    def start_tool(self, name: str, **arguments: Any) -> PendingTool:
        """Call a tool the agent declared; await the result or cancel it."""
        self._tool_calls += 1
        return self.link.call_tool(
            name, arguments, call_id=f"llm-call-{self._tool_calls}", epoch=self.epoch
        )

    async def tool(self, name: str, **arguments: Any) -> ToolFinished:
        """Call a tool and wait for how it ended (result, error, timeout)."""
        return await self.start_tool(name, **arguments)

    def cancel(self, pending: PendingTool) -> None:
        """Stop waiting for a tool call, as a barge-in does."""
        self.link.cancel_tool(pending.request_id)

    async def expect(self, kind: type[C], *, timeout: float = WAIT) -> C:
        """The next command the agent sends after the ones already expected; it must be a
        ``kind`` (an AssertionError names what came instead)."""
        async with asyncio.timeout(timeout):
            while self._seen >= len(self.sent):
                self._arrived.clear()
                await self._arrived.wait()
        command = self.sent[self._seen]
        self._seen += 1
        if not isinstance(command, kind):
            raise AssertionError(f"expected a {kind.type}, the agent sent {command!r}")
        return command

    async def hang_up(self, reason: str = SessionEndReason.HANGUP) -> None:
        """End the call: ``session.end`` after what is queued, then close."""
        await self.link.end(reason)

    async def _read(self) -> None:
        async for notice in self.link:
            if isinstance(notice, CommandReceived):
                self.sent.append(notice.command)
                self.link.answer(notice, error=self.refuse.get(notice.command.type))
                self._arrived.set()
            else:
                self.notices.append(notice)
