"""A fake Brisvox agent for people who build the engine side: :class:`FakeAgent`.

It is voxwire's own agent server (:class:`voxwire.brisvox.agent.AgentServer`) on a loopback
port, behind a relay the fake can cut, taking one call at a time: it accepts the handshake (or
rejects it, as :attr:`FakeAgent.decision` says), answers the tool calls it declares with the
answers it was given, and hands the test the real :class:`~voxwire.brisvox.agent.AgentSession`
to send commands with. Everything the engine under test sends is recorded, taken or refused
(with the Brisvox code, as the agent's core judged it).

```text
async with FakeAgent(answers={"opening_hours": "noon to ten"}) as agent:
    engine = asyncio.create_task(my_engine_call(agent.url))
    session = await agent.connected()                 # the call, accepted
    text = await agent.expect(brisvox.UserText)       # the engine's next event, of this type
    result = await session.send_say(text="We open at noon.")   # answered by the engine
    call = await agent.expect(brisvox.ToolCall)       # answered by the fake: "noon to ten"
    await agent.drop()                                # the engine's link is reset
    await engine
assert agent.refused == []
```

With ``resume=True`` the fake declares ``resume``, so a dropped call is parked and the engine
may take it up again (:meth:`FakeAgent.resumed`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from voxwire import brisvox
from voxwire.brisvox.agent import (
    Accept,
    AgentServer,
    AgentSession,
    Reject,
    Tool,
    ToolContext,
    ToolError,
)
from voxwire.capture import Recorder
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.testing._faultproxy import FaultProxy
from voxwire.testing.watch import ExpectationFailed, Watch, Watching

__all__ = ["FakeAgent", "answering"]

T = TypeVar("T")


def answering(name: str, answer: object) -> Tool:
    """A read_only tool ``name`` that answers every call with ``answer`` (a JSON value), or
    fails it when ``answer`` is a :class:`~voxwire.brisvox.agent.ToolError`."""

    async def run(ctx: ToolContext) -> object:
        if isinstance(answer, ToolError):
            raise answer
        return answer

    declaration = brisvox.ToolDeclaration(
        name=name,
        description=f"The fake agent's {name}.",
        parameters={"type": "object"},
        kind=brisvox.ToolKind.READ_ONLY,
    )
    return Tool(declaration, run)


def _expectable(message: Any) -> bool:
    # The handshake is connected()'s and resumed()'s; a command's result, its command's return.
    return not isinstance(message, brisvox.SessionStart | brisvox.CommandResult)


class FakeAgent(Watching):
    """A Brisvox agent for tests of an engine, one call at a time, on loopback.

    Args:
        answers: Tools to declare, by name, each answering every call with its value
            (:func:`answering`).
        tools: More tools, as ``AgentServer`` takes them.
        decision: How to answer the next ``session.start``: ``Accept(...)`` (the default
            offers every tool) or ``Reject(code, message)``; change :attr:`decision` between
            calls.
        token: The bearer token the engine must present (``None``: any engine).
        resume: Declare ``resume``: a dropped call is parked for the engine to take up again.
        clock: The clock of the agent's timers.
        wait: Real seconds :meth:`expect` and the other waits last by default
            (``voxwire.testing.watch.WAIT``).
        record: A recorder every message and link change is passed on to.
    """

    def __init__(
        self,
        *,
        answers: Mapping[str, object] | None = None,
        tools: Sequence[Tool] = (),
        decision: Accept | Reject | None = None,
        token: str | None = None,
        resume: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        wait: float | None = None,
        record: Recorder | None = None,
    ) -> None:
        self.tools = [*(answering(n, a) for n, a in (answers or {}).items()), *tools]
        self.decision: Accept | Reject = decision or Accept()
        """How the fake answers the next ``session.start``."""
        self.token = token
        self.resume = resume
        self.clock = clock
        self.wait = wait
        self.watch = Watch(
            "brisvox",
            "agent",
            fake="the fake agent",
            peer="the engine",
            expectable=_expectable,
            then=record,
            clock=clock,
        )
        self.sessions: list[AgentSession] = []
        """Every call the fake took, in order (the last one is :attr:`session`)."""
        self.starts: list[brisvox.SessionStart] = []
        """Every ``session.start`` the engine sent for a new call, taken or rejected."""
        self._handed = 0
        self._server: AgentServer | None = None
        self._relay: FaultProxy | None = None

    def __repr__(self) -> str:
        return f"FakeAgent({self.url if self._relay else 'not started'})"

    def answer(self, name: str, answer: object) -> None:
        """Declare the tool ``name`` (offered from the next call on), answering every call with
        ``answer``, or failing it with a ``ToolError`` given as the answer."""
        tool = answering(name, answer)
        self.tools.append(tool)
        if self._server is not None:
            self._server.tools[name] = tool

    @property
    def url(self) -> str:
        """The URL the engine under test connects to (``ws://127.0.0.1:PORT``)."""
        return f"ws://127.0.0.1:{self._started().port}"

    # -- what the engine sent -------------------------------------------------------------------

    @property
    def session(self) -> AgentSession | None:
        """The call now (the last one the fake took), or ``None`` before the first."""
        return self.sessions[-1] if self.sessions else None

    # -- the script -----------------------------------------------------------------------------

    async def connected(self, *, timeout: float | None = None) -> AgentSession:
        """The next call the fake takes, once its ``session.accept`` was sent."""

        def taken() -> AgentSession | None:
            return self.sessions[self._handed] if len(self.sessions) > self._handed else None

        session = await self.watch.until(
            taken, "no call from the engine", timeout=self._wait(timeout)
        )
        self._handed += 1
        return session

    async def expect(self, kind: type[T], *, timeout: float | None = None) -> T:
        """The engine's next ``kind`` after the messages already expected; the messages of other
        types on the way are passed over (``session.start`` is :meth:`connected`'s and
        :meth:`resumed`'s, a ``command.result`` its command's return). See
        :meth:`voxwire.testing.watch.Watch.expect`."""
        return await self.watch.expect(kind, timeout=self._wait(timeout))

    async def drop(self, *, timeout: float | None = None) -> None:
        """Reset the engine's link, both ways, as a network failure does, and wait until the
        agent noticed (the call is parked with ``resume``, else over)."""
        session = self._live()
        if self._started().reset() == 0:
            raise ExpectationFailed("the fake agent has no link to drop")
        await self.watch.until(
            lambda: session.closed, "the agent did not see the drop", timeout=self._wait(timeout)
        )

    async def resumed(self, *, timeout: float | None = None) -> None:
        """Wait until the engine took the parked call up again (``resume``)."""
        session = self._live()
        resumes = session.resumes

        def back() -> bool:
            if not session.parked and session.closed:
                raise ExpectationFailed("the call ended instead of being resumed")
            return session.resumes > resumes

        await self.watch.until(
            back, "the engine did not resume the call", timeout=self._wait(timeout)
        )

    async def ended(self, *, timeout: float | None = None) -> None:
        """Wait until the call is over (the engine's ``session.end``, a lost link...)."""
        session = self._live()
        await self.watch.until(
            lambda: session.closed and not session.parked,
            "the call did not end",
            timeout=self._wait(timeout),
        )

    # -- life -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on loopback (:attr:`url`)."""
        self._server = AgentServer(
            self._serve,
            tools=self.tools,
            on_start=self._decide,
            token=self.token,
            resume=self.resume,
            clock=self.clock,
            record=self.watch,
        )
        await self._server.start()
        self._relay = FaultProxy(self._server.port)
        await self._relay.start()

    async def close(self) -> None:
        """Stop: the engine's links are closed and every call ends."""
        if self._relay is not None:
            await self._relay.close()
        if self._server is not None:
            await self._server.close()

    async def __aenter__(self) -> FakeAgent:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _decide(self, start: brisvox.SessionStart) -> Accept | Reject:
        self.starts.append(start)
        self.watch.notify()
        return self.decision

    async def _serve(self, session: AgentSession) -> None:
        """One call: its events read to the end (the watch keeps them)."""
        self.sessions.append(session)
        self.watch.notify()
        async for _ in session:  # the handlers of session.on() run as messages arrive
            pass
        self.watch.notify()

    def _live(self) -> AgentSession:
        session = self.session
        if session is None:
            raise ExpectationFailed("the fake agent has taken no call yet")
        return session

    def _started(self) -> FaultProxy:
        if self._relay is None:
            raise ExpectationFailed("the fake agent is not started: use `async with`")
        return self._relay
