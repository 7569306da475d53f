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
failure :attr:`AgentCall.refuse` names for its type); a message the engine refused instead (a
blank ``say`` from an agent not written with voxwire) in :attr:`AgentCall.refused`, and
:meth:`AgentCall.expect` fails naming it; link changes land in :attr:`AgentCall.notices`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from voxwire.brisvox.codec import decode
from voxwire.brisvox.engine import AgentTarget, EngineLink, PendingTool
from voxwire.brisvox.engine_core import (
    AgentAccepted,
    CommandReceived,
    LinkDown,
    LinkSettings,
    ToolFinished,
    ToolOverdue,
)
from voxwire.brisvox.errors import ErrorCode, ProtocolError
from voxwire.brisvox.messages import (
    COMMAND_TYPES,
    CallIdentity,
    Capabilities,
    Command,
    Event,
    SessionAccept,
    SessionEndReason,
    ToolDeclaration,
)
from voxwire.brisvox.outputs import HandshakeFailed
from voxwire.capture import Record, Recorder, open_recorder
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.errors import HandshakeError
from voxwire.hosts import check_url

__all__ = ["AgentCall", "AgentRefused", "Refused"]

C = TypeVar("C", bound=Command)

WAIT: float = 5.0
"""Default real seconds :meth:`AgentCall.expect` waits."""


class AgentRefused(HandshakeError, AssertionError):
    """The agent did not take the call (it rejected it, or the handshake failed)."""


@dataclass(frozen=True, slots=True)
class Refused:
    """A message of the agent the engine refused after the handshake, never taking it: it was
    answered with a failed ``command.result`` or an ``error`` event."""

    data: str | bytes
    """The message as the agent sent it."""
    error: ProtocolError
    """What was wrong with it (its code is the one the agent was answered with)."""
    after: int
    """How many commands the agent had sent before it (its place among :attr:`AgentCall.sent`)."""


class _Watch:
    """The engine's recorder: keeps what the engine refused, and passes every message on to
    the recorder the caller asked for."""

    def __init__(self, then: Recorder | None) -> None:
        self.then = then
        self.refused: list[Refused] = []
        self.commands = 0
        self.engine: EngineLink | None = None
        self.changed = asyncio.Event()

    def record(self, sender: str, data: str | bytes) -> None:
        if self.then is not None:
            self.then.record(sender, data)
        if sender != "agent" or self.engine is None or not self.engine.up:
            return  # the handshake's first message is the core's to judge (its notices say)
        if isinstance(data, bytes):
            error = ProtocolError(ErrorCode.BAD_MESSAGE, "a binary frame")
        else:
            try:
                message = decode(data, "agent")
            except ProtocolError as exc:
                error = exc
            else:
                if message.type in COMMAND_TYPES:
                    self.commands += 1
                return
        self.refused.append(Refused(data, error, self.commands))
        self.changed.set()

    def link(self, event: str) -> None:
        if self.then is not None:
            self.then.link(event)


class AgentCall:
    """One call played to an agent: events in, the agent's commands and tool results out."""

    def __init__(
        self, link: EngineLink, refuse: Mapping[str, tuple[str, str]], watch: _Watch
    ) -> None:
        self.link = link
        self.refuse = dict(refuse)
        """Command types to answer with a failure: ``{"transfer": ("unsupported", "...")}``."""
        self.sent: list[Command] = []
        """Every command the agent sent, in order."""
        self.refused = watch.refused
        """Every message the engine refused after the handshake instead of taking it, in order."""
        self.notices: list[ToolOverdue | AgentAccepted | HandshakeFailed | LinkDown] = []
        """The link's changes after the handshake (resumptions, losses)."""
        self.epoch = 0
        """The call's current turn number."""
        self._seen = 0
        self._refused_seen = 0
        self._arrived = watch.changed
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
        recorder, capture = open_recorder(
            record, protocol="brisvox", recorded_by="server", session_id=session_id, clock=clock
        )
        watch = _Watch(recorder)
        watch.engine = link = EngineLink(
            target,
            session_id=session_id,
            agent=agent,
            capabilities=capabilities,
            call=call,
            settings=settings,
            clock=clock,
            record=watch,
        )
        played = cls(link, refuse or {}, watch)
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
            if capture is not None:
                capture.close()

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
        ``kind`` (an AssertionError names what came instead, or what the engine refused
        meanwhile). TimeoutError when nothing came within ``timeout`` real seconds."""
        try:
            async with asyncio.timeout(timeout):
                while self._seen >= len(self.sent) and self._next_refused() is None:
                    self._arrived.clear()
                    await self._arrived.wait()
        except TimeoutError:
            raise TimeoutError(f"no {kind.type} from the agent within {timeout} s") from None
        refused = self._next_refused()
        if refused is not None:
            self._refused_seen += 1
            raise AssertionError(
                f"expected a {kind.type}, the engine refused what the agent sent: "
                f"{refused.error} ({refused.data!r})"
            )
        command = self.sent[self._seen]
        self._seen += 1
        if not isinstance(command, kind):
            raise AssertionError(f"expected a {kind.type}, the agent sent {command!r}")
        return command

    def _next_refused(self) -> Refused | None:
        """The refusal due before the next command, if one is."""
        if self._refused_seen < len(self.refused):
            refused = self.refused[self._refused_seen]
            if refused.after <= self._seen:
                return refused
        return None

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
