"""A fake Brisvox engine for people who build an agent: :class:`AgentCall` plays a call to the
agent under test through voxwire's own engine side (:class:`voxwire.brisvox.engine.EngineLink`).

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
blank ``say`` from an agent not written with voxwire) in :attr:`AgentCall.refused`, with its
code, as the engine's core judged it (:mod:`voxwire.testing.watch`), and
:meth:`AgentCall.expect` fails naming it; link changes land in :attr:`AgentCall.notices`. A
handler of the call's session that raises (the agent's, when it runs in the test's process, or
one registered on :attr:`AgentCall.link`) lands in :attr:`AgentCall.handler_failures`, and
:meth:`AgentCall.expect` fails with its text rather than waiting for a command that will not
come (:func:`voxwire.session.watch_handler_failures`).
(``voxwire.brisvox.testing``, its home until 0.x, re-exports it.)
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
from voxwire.capture import Record, open_recorder
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.errors import HandshakeError
from voxwire.hosts import check_url
from voxwire.session import HandlerFailure, watch_handler_failures
from voxwire.testing.watch import Entry, ExpectationFailed, Refused, Watch

__all__ = ["AgentCall", "AgentRefused", "Refused"]

C = TypeVar("C", bound=Command)


class AgentRefused(HandshakeError, AssertionError):
    """The agent did not take the call (it rejected it, or the handshake failed)."""


def _command(message: Any) -> bool:
    return message.type in COMMAND_TYPES


class AgentCall:
    """One call played to an agent: events in, the agent's commands and tool results out."""

    def __init__(
        self,
        link: EngineLink,
        refuse: Mapping[str, tuple[str, str]],
        watch: Watch,
        wait: float | None = None,
    ) -> None:
        self.link = link
        self.refuse = dict(refuse)
        """Command types to answer with a failure: ``{"transfer": ("unsupported", "...")}``."""
        self.sent: list[Command] = []
        """Every command the agent sent, in order."""
        self.refused = watch.refused
        """Every message of the agent the engine refused instead of taking it, in order."""
        self.notices: list[ToolOverdue | AgentAccepted | HandshakeFailed | LinkDown] = []
        """The link's changes after the handshake (resumptions, losses)."""
        self.epoch = 0
        """The call's current turn number."""
        self.watch = watch
        """Everything the call saw, judged as the engine's core judges it."""
        self.wait = wait
        """Real seconds :meth:`expect` waits by default (``voxwire.testing.watch.WAIT``)."""
        self.handler_failures: list[HandlerFailure] = []
        """Every handler of the call's session that raised, in order (voxwire.session)."""
        self._seen = 0
        self._refused_seen = 0
        self._failures_seen = 0
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
        wait: float | None = None,
    ) -> AsyncIterator[AgentCall]:
        """Connect to the agent at ``url`` and handshake; raise :class:`AgentRefused` when it
        does not take the call. The call is closed on exit (without ``session.end`` unless
        :meth:`hang_up` ran). ``record`` records it, as ``EngineLink``'s option; ``wait`` is
        the real seconds :meth:`expect` waits by default."""
        target = AgentTarget(
            check_url(url, allow_insecure=allow_insecure), token, caller_identity=call is not None
        )
        recorder, capture = open_recorder(
            record, protocol="brisvox", recorded_by="server", session_id=session_id, clock=clock
        )
        watch = Watch(
            "brisvox",
            "engine",
            fake="the engine",
            peer="the agent",
            expectable=_command,
            then=recorder,
            clock=clock,
        )
        link = EngineLink(
            target,
            session_id=session_id,
            agent=agent,
            capabilities=capabilities,
            call=call,
            settings=settings,
            clock=clock,
            record=watch,
        )
        played = cls(link, refuse or {}, watch, wait)
        try:
            with watch_handler_failures(played._handler_failed):
                if not await link.start():
                    notice = await link.next_notice()
                    refused = "".join(f"; the engine refused {r.error}" for r in watch.refused)
                    raise AgentRefused(f"the agent did not take the call: {notice}{refused}")
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

    @property
    def log(self) -> list[Entry]:
        """Everything the call saw, both ways, in order."""
        return self.watch.log

    def transcript(self) -> str:
        """What the call saw lately, one line each (the plugin shows it when a test fails)."""
        return self.watch.transcript()

    async def expect(self, kind: type[C], *, timeout: float | None = None) -> C:
        """The next command the agent sends after the ones already expected, answered; it must
        be a ``kind``. Raises :class:`~voxwire.testing.watch.ExpectationFailed` naming what
        came instead (or what the engine refused meanwhile, or the handler of the call's session
        that raised), and
        :class:`~voxwire.testing.watch.NothingArrived` (also a ``TimeoutError``) naming what
        arrived when nothing came within ``timeout`` real seconds."""
        await self.watch.until(
            lambda: (
                self._seen < len(self.sent)
                or self._next_refused() is not None
                or self._failures_seen < len(self.handler_failures)
            ),
            f"no {kind.type} from the agent",
            timeout=self.wait if timeout is None else timeout,
        )
        if self._failures_seen < len(self.handler_failures):
            failure = self.handler_failures[self._failures_seen]
            self._failures_seen += 1
            raise ExpectationFailed(f"expected a {kind.type}; {failure}") from failure.error
        refused = self._next_refused()
        if refused is not None:
            self._refused_seen += 1
            raise ExpectationFailed(
                f"expected a {kind.type}, the engine refused what the agent sent: "
                f"{refused.error} ({refused.data!r})"
            )
        command = self.sent[self._seen]
        self._seen += 1
        if not isinstance(command, kind):
            raise ExpectationFailed(f"expected a {kind.type}, the agent sent {command!r}")
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

    def _handler_failed(self, failure: HandlerFailure) -> None:
        if failure.session_id == self.link.core.session_id:
            self.handler_failures.append(failure)
            self.watch.notify()

    async def _read(self) -> None:
        async for notice in self.link:
            if isinstance(notice, CommandReceived):
                self.sent.append(notice.command)
                self.link.answer(notice, error=self.refuse.get(notice.command.type))
                self.watch.notify()
            else:
                self.notices.append(notice)
