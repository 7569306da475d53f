"""The agent side over real loopback sockets, driven by raw JSON frames."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.peers.raw import DEADLINE, RawEngine, aio, frame, start, tool_call
from tests.timing import Lateness
from voxwire import brisvox
from voxwire.brisvox.agent import (
    Accept,
    AgentServer,
    AgentSession,
    CommandFailed,
    CommandTimeout,
    EventsDropped,
    LinkDown,
    Reject,
    Resumed,
    SessionClosed,
    SessionEvent,
    Tool,
    ToolContext,
    ToolError,
)
from voxwire.clock import ScaledClock

TOKEN = "s3cret-token"


def _tool(
    name: str, run: Callable[[ToolContext], Awaitable[object]], kind: str = "read_only"
) -> Tool:
    return Tool(
        brisvox.ToolDeclaration(
            name=name,
            description=f"The {name} tool.",
            parameters={"type": "object", "properties": {}},
            kind=brisvox.ToolKind(kind),
        ),
        run,
    )


class Recorder:
    """An on_session handler that records what its calls saw."""

    def __init__(self, delay: float = 0.0) -> None:
        self.sessions: list[AgentSession] = []
        self.events: list[SessionEvent] = []
        self.done = asyncio.Event()
        self.delay = delay

    async def __call__(self, session: AgentSession) -> None:
        self.sessions.append(session)
        async for event in session:
            self.events.append(event)
            if self.delay:
                await asyncio.sleep(self.delay)
        self.done.set()

    async def wait_for(self, kind: type, count: int = 1) -> list[Any]:
        async with asyncio.timeout(DEADLINE):
            while len(found := [e for e in self.events if isinstance(e, kind)]) < count:
                await asyncio.sleep(0.005)
        return found


@asynccontextmanager
async def agent(
    handler: Callable[[AgentSession], Awaitable[None]], **kwargs: Any
) -> AsyncIterator[AgentServer]:
    kwargs.setdefault("token", TOKEN)
    async with AgentServer(handler, **kwargs) as server:
        yield server


async def _engine(server: AgentServer, **kwargs: Any) -> RawEngine:
    return await RawEngine.open(server.url, TOKEN, **kwargs)


# -- listening, auth, browsers ------------------------------------------------------------------


@aio
async def test_the_server_listens_on_loopback_by_default_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "voxwire.brisvox.agent")
    async with agent(Recorder()) as server:
        url = server.url
        assert url == f"ws://127.0.0.1:{server.port}" and server.port > 0
    assert f"listening on {url} (loopback only)" in caplog.text


@pytest.mark.parametrize("token", [None, "wrong", f"{TOKEN}x"])
@aio
async def test_a_missing_or_wrong_token_gets_401_before_the_upgrade(token: str | None) -> None:
    async with agent(Recorder()) as server:
        with pytest.raises(InvalidStatus) as caught:
            await RawEngine.open(server.url, token)
    assert caught.value.response.status_code == 401
    assert caught.value.response.headers["WWW-Authenticate"] == "Bearer"


@aio
async def test_the_bearer_scheme_is_case_insensitive_and_spaces_are_trimmed() -> None:
    async with (
        agent(Recorder()) as server,
        connect(
            server.url, additional_headers={"Authorization": f"bearer   {TOKEN}  "}, proxy=None
        ) as ws,
    ):
        engine = RawEngine(ws)
        assert isinstance(await engine.handshake(), brisvox.SessionAccept)


@aio
async def test_a_browser_origin_is_refused_with_403() -> None:
    async with agent(Recorder()) as server:
        with pytest.raises(InvalidStatus) as caught:
            await RawEngine.open(server.url, TOKEN, origin="https://evil.example")
    assert caught.value.response.status_code == 403


@aio
async def test_the_token_comes_from_the_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRISVOX_AGENT_TOKEN", "from-env")
    server = AgentServer(Recorder())
    assert server.token == "from-env"
    monkeypatch.setenv("BRISVOX_AGENT_TOKEN", "")
    assert AgentServer(Recorder()).token is None


# -- the handshake --------------------------------------------------------------------------------


@aio
async def test_a_call_is_accepted_with_the_tools_and_its_events_reach_the_session() -> None:
    async def hours(ctx: ToolContext) -> object:
        return "noon to ten"

    recorder = Recorder()
    decided: list[brisvox.SessionStart] = []

    async def on_start(start_: brisvox.SessionStart) -> Accept:
        decided.append(start_)
        return Accept(greeting="Hi, Luigi's here.", events=[brisvox.EventType.USER_TEXT])

    async with agent(recorder, tools=[_tool("hours", hours)], on_start=on_start) as server:
        engine = await _engine(server)
        accept = await engine.handshake()
        assert isinstance(accept, brisvox.SessionAccept)
        assert [t.name for t in accept.tools] == ["hours"] and accept.version == 1
        assert accept.greeting == "Hi, Luigi's here." and accept.events == ["user.text"]
        assert not accept.resume
        await engine.send(frame("user.text", 2, epoch=1, text="hours?"))
        [event] = await recorder.wait_for(brisvox.UserText)
        assert event.text == "hours?" and decided[0].agent == "luigi"
        assert recorder.sessions[0].id == "42" and server.calls == 1
        await engine.send(frame("session.end", 3, reason="hangup"))
        async with asyncio.timeout(DEADLINE):
            await recorder.done.wait()
        assert isinstance(recorder.events[-1], brisvox.SessionEnd) and server.calls == 0
        await engine.close()


@aio
async def test_the_start_handler_may_reject_and_a_failing_one_rejects_unavailable() -> None:
    async def on_start(start_: brisvox.SessionStart) -> Accept | Reject:
        if start_.session_id == "busy":
            return Reject("busy_now", "try later")
        raise RuntimeError("boom")

    async with agent(Recorder(), on_start=on_start) as server:
        engine = await _engine(server)
        assert await engine.handshake(start(session_id="busy")) == brisvox.SessionReject(
            code="busy_now", message="try later"
        )
        assert await engine.closed() == (1000, "")
        engine = await _engine(server)
        assert await engine.handshake() == brisvox.SessionReject(
            code="unavailable", message="agent error"
        )


@aio
async def test_a_slow_start_handler_is_rejected_within_the_budget() -> None:
    async def on_start(start_: brisvox.SessionStart) -> Accept:
        await asyncio.sleep(10)
        return Accept()

    async with (
        agent(Recorder(), on_start=on_start, handshake_timeout=0.2) as server,
        Lateness() as late,
    ):
        before = time.monotonic()  # the budget runs from the connection
        engine = await _engine(server)
        began = time.monotonic()
        assert await engine.handshake() == brisvox.SessionReject(
            code="unavailable", message="handshake budget exceeded"
        )
        ended = time.monotonic()  # the budget's timer, the reject written and read
        assert ended - before >= 0.2
        assert ended - began <= 0.2 + late.allowance(began, ended, hops=4)


@aio
async def test_no_session_start_closes_1008_and_a_bad_one_1002() -> None:
    async with agent(Recorder(), handshake_timeout=0.2) as server:
        engine = await _engine(server)
        assert await engine.closed() == (1008, "no session.start")
        engine = await _engine(server)
        await engine.send(frame("user.text", 1, epoch=1, text="hi"))
        assert await engine.closed() == (1002, "expected session.start")


@aio
async def test_an_unsupported_version_is_rejected() -> None:
    async with agent(Recorder()) as server:
        engine = await _engine(server)
        reject = await engine.handshake(start(versions=[2]))
        assert isinstance(reject, brisvox.SessionReject) and reject.code == "unsupported_version"


# -- commands ----------------------------------------------------------------------------------------


@aio
async def test_commands_carry_ids_and_wait_for_their_results() -> None:
    outcome: list[object] = []

    async def on_session(session: AgentSession) -> None:
        outcome.append(await session.send_say(text="We open at noon.", re=2))
        try:
            await session.command(brisvox.Transfer(destination="+15551230002", id="t-1"))
        except CommandFailed as exc:
            outcome.append(exc)
        with pytest.raises(brisvox.ProtocolError, match="invalid_argument"):
            await session.send_say(text="   ")

    async with agent(on_session) as server:
        engine = await _engine(server)
        await engine.handshake()
        say = await engine.recv()
        assert say == brisvox.Say(id="c1", re=2, text="We open at noon.")
        await engine.send(frame("command.result", 2, id="c1", ok=True))
        transfer = await engine.recv()
        assert isinstance(transfer, brisvox.Transfer) and transfer.id == "t-1"
        error = {"code": "unsupported", "message": "no call control"}
        await engine.send(frame("command.result", 3, id="t-1", ok=False, error=error))
        async with asyncio.timeout(DEADLINE):
            while len(outcome) < 2:
                await asyncio.sleep(0.005)
    assert isinstance(outcome[0], brisvox.CommandResult) and outcome[0].ok
    assert isinstance(outcome[1], CommandFailed) and outcome[1].code == "unsupported"


@aio
async def test_a_command_without_result_times_out_as_outcome_unknown_and_is_not_retried() -> None:
    failures: list[CommandTimeout] = []

    async def on_session(session: AgentSession) -> None:
        try:
            await session.command(brisvox.Say(text="hello"), timeout=10.0)
        except CommandTimeout as exc:
            failures.append(exc)

    async with agent(on_session, clock=ScaledClock(100)) as server:
        engine = await _engine(server)
        await engine.handshake()
        assert isinstance(await engine.recv(), brisvox.Say)
        async with asyncio.timeout(DEADLINE):
            while not failures:
                await asyncio.sleep(0.005)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await engine.ws.recv()  # no retry
    assert failures[0].code == "outcome_unknown" and failures[0].command_id == "c1"


@aio
async def test_commands_on_a_closed_link_raise_session_closed() -> None:
    raised: list[BaseException] = []
    closed = asyncio.Event()

    async def on_session(session: AgentSession) -> None:
        async for _ in session:
            pass
        try:
            await session.send_say(text="too late")
        except SessionClosed as exc:
            raised.append(exc)
        closed.set()

    async with agent(on_session) as server:
        engine = await _engine(server)
        await engine.handshake()
        await engine.close()
        async with asyncio.timeout(DEADLINE):
            await closed.wait()
    assert raised


# -- tools -------------------------------------------------------------------------------------------


@aio
async def test_tools_run_concurrently_and_cancels_follow_the_kind() -> None:
    release = asyncio.Event()
    contexts: dict[str, ToolContext] = {}

    async def slow(ctx: ToolContext) -> object:
        contexts[ctx.call.call_id] = ctx
        await release.wait()
        return "slow done"

    async def fast(ctx: ToolContext) -> object:
        return {"open": True}

    async def broken(ctx: ToolContext) -> object:
        raise ToolError("the calendar is down")

    async def crashing(ctx: ToolContext) -> object:
        raise KeyError("secret detail")

    async def huge(ctx: ToolContext) -> object:
        return "x" * 70_000

    tools = [
        _tool("slow", slow),
        _tool("book", slow, kind="side_effect"),
        _tool("fast", fast),
        _tool("broken", broken),
        _tool("crashing", crashing),
        _tool("huge", huge),
    ]
    async with agent(Recorder(), tools=tools) as server:
        engine = await _engine(server)
        await engine.handshake()
        await engine.send(tool_call(2, 1, "slow"))
        await engine.send(tool_call(3, 2, "book", kind="side_effect"))
        await engine.send(tool_call(4, 3, "fast"))
        assert await engine.recv() == brisvox.ToolResult(id=3, result={"open": True})
        await engine.send(frame("tool.cancel", 5, id=1, reason="interrupted"))
        await engine.send(frame("tool.cancel", 6, id=2, reason="timeout"))
        await engine.send(tool_call(7, 4, "broken"))
        assert await engine.recv() == brisvox.ToolResult(id=4, error="the calendar is down")
        await engine.send(tool_call(8, 5, "crashing"))
        assert await engine.recv() == brisvox.ToolResult(id=5, error="tool failed: KeyError")
        await engine.send(tool_call(9, 6, "huge"))
        assert await engine.recv() == brisvox.ToolResult(id=6, error="tool result is too large")
        await engine.send(tool_call(10, 7, "nope"))
        assert await engine.recv() == brisvox.ToolResult(id=7, error="unknown tool 'nope'")
        assert contexts["llm-1"].cancel_reason == "interrupted"
        assert contexts["llm-2"].cancelled.is_set() and contexts["llm-2"].cancel_reason == "timeout"
        release.set()
        # the side_effect call finishes and answers; the cancelled read_only one does not
        assert await engine.recv() == brisvox.ToolResult(id=2, result="slow done")
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await engine.ws.recv()


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"kind": "telepathy"}, "invalid_argument: tool.call $.kind"),
        ({"arguments": "x"}, "bad_message: tool.call $.arguments"),
        ({"idempotency_key": "short"}, "invalid_argument: tool.call $.idempotency_key"),
    ],
)
@aio
async def test_a_tool_call_that_cannot_be_decoded_is_answered_with_an_error_result(
    change: dict[str, object], code: str
) -> None:
    async def fast(ctx: ToolContext) -> object:
        return "ok"

    async with agent(Recorder(), tools=[_tool("fast", fast)]) as server:
        engine = await _engine(server)
        await engine.handshake()
        bad = {**json.loads(tool_call(2, 7, "fast")), **change}
        await engine.send(json.dumps(bad))
        answer = await engine.recv()
        assert isinstance(answer, brisvox.ToolResult) and answer.id == 7
        assert isinstance(answer.error, str) and answer.error.startswith(code)
        await engine.send(tool_call(3, 8, "fast"))  # the link goes on
        assert await engine.recv() == brisvox.ToolResult(id=8, result="ok")


@aio
async def test_a_tool_call_whose_id_is_no_valid_id_is_logged_and_the_link_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fast(ctx: ToolContext) -> object:
        return "ok"

    caplog.set_level(logging.WARNING, "voxwire.brisvox.agent")
    async with agent(Recorder(), tools=[_tool("fast", fast)]) as server:
        engine = await _engine(server)
        await engine.handshake()
        await engine.send(tool_call(2, -1, "fast"))  # no tool.result can carry id -1
        await engine.send(tool_call(3, 8, "fast"))
        assert await engine.recv() == brisvox.ToolResult(id=8, result="ok")
    assert "tool.call $.id" in caplog.text


@pytest.mark.parametrize("resume", [False, True])
@aio
async def test_a_failing_writer_takes_the_link_down_and_the_call_ends_or_parks(
    resume: bool, caplog: pytest.LogCaptureFixture
) -> None:
    async def fast(ctx: ToolContext) -> object:
        return "ok"

    recorder = Recorder()
    async with agent(recorder, tools=[_tool("fast", fast)], resume=resume) as server:
        engine = await _engine(server)
        await engine.handshake()
        await engine.send(tool_call(2, 1, "fast"))
        assert await engine.recv() == brisvox.ToolResult(id=1, result="ok")
        session = recorder.sessions[0]
        assert session._link is not None

        def broken(data: bytes) -> None:
            raise RuntimeError("injected writer fault")

        session._link.ws.transport.write = broken  # type: ignore[method-assign]
        await engine.send(tool_call(3, 2, "fast"))  # its result is the next write
        async with asyncio.timeout(DEADLINE):
            while not session.closed:
                await asyncio.sleep(0.005)
        assert session.parked is resume
        if not resume:
            [closed] = await recorder.wait_for(LinkDown)
            assert "the writer failed" in closed.reason
        with pytest.raises(SessionClosed):
            await session.send_say(text="too late")
    assert "injected writer fault" in caplog.text


@aio
async def test_a_slow_handler_loses_events_counted_while_reading_goes_on() -> None:
    recorder = Recorder(delay=0.05)

    async def fast(ctx: ToolContext) -> object:
        return "ok"

    async with (
        agent(recorder, tools=[_tool("fast", fast)], event_queue=4) as server,
        Lateness() as late,
    ):
        engine = await _engine(server)
        await engine.handshake()
        for seq in range(2, 42):
            await engine.send(frame("bot.text", seq, epoch=1, text=f"w{seq}"))
        began = time.monotonic()
        await engine.send(tool_call(42, 1, "fast"))
        assert await engine.recv() == brisvox.ToolResult(id=1, result="ok")
        ended = time.monotonic()  # the reader never waited on the handler (2 s of events)
        assert ended - began < 0.5 + late.allowance(began, ended, hops=4)
        [dropped] = await recorder.wait_for(EventsDropped)
        session = recorder.sessions[0]
        assert dropped.count == session.events_lost > 0
        delivered = [e for e in recorder.events if isinstance(e, brisvox.BotText)]
        await engine.send(frame("session.end", 43, reason="hangup"))
        await recorder.wait_for(brisvox.SessionEnd)
    assert len(delivered) + dropped.count <= 40


@aio
async def test_a_binary_frame_is_ignored_and_a_too_large_message_closes_the_link() -> None:
    recorder = Recorder()
    async with agent(recorder) as server:
        engine = await _engine(server, max_size=None)
        await engine.handshake()
        await engine.ws.send(b"\x00\x01")
        await engine.send(frame("user.text", 2, epoch=1, text="still here"))
        await recorder.wait_for(brisvox.UserText)
        padding = 65537 - len(frame("user.text", 3, epoch=1, text=""))
        big = frame("user.text", 3, epoch=1, text="x" * padding)
        assert len(big.encode()) == 65537
        await engine.send(big)
        code, _ = await engine.closed()
        assert code == 1009
        [closed] = await recorder.wait_for(LinkDown)
        assert closed.reason


# -- resume ------------------------------------------------------------------------------------------


def _resuming(seq: int, previous_seq: int, attempt: int = 1, session_id: str = "42") -> str:
    resume = {"attempt": attempt, "previous_seq": previous_seq, "down_ms": 120}
    return start(seq=seq, t_ms=41200, session_id=session_id, resume=resume)


@aio
async def test_a_lost_link_is_parked_and_taken_up_again() -> None:
    recorder = Recorder()
    tools_run: list[str] = []

    async def lookup(ctx: ToolContext) -> object:
        tools_run.append(ctx.call.call_id)
        return "ok"

    async with agent(recorder, resume=True, tools=[_tool("lookup", lookup)]) as server:
        engine = await _engine(server)
        accept = await engine.handshake()
        assert isinstance(accept, brisvox.SessionAccept) and accept.resume
        await engine.send(frame("user.text", 2, epoch=1, text="before"))
        await recorder.wait_for(brisvox.UserText)
        starts: list[brisvox.SessionStart] = []
        recorder.sessions[0].on("session.start", starts.append)
        engine.ws.transport.abort()
        async with asyncio.timeout(DEADLINE):
            while not recorder.sessions[0].parked:
                await asyncio.sleep(0.005)
        engine = await _engine(server)
        resumed = await engine.handshake(_resuming(seq=5, previous_seq=3))
        assert resumed == brisvox.SessionAccept(version=1, tools=[], resume=True)
        await engine.send(frame("events.lost", 6, count=1))
        await engine.send(tool_call(7, 9, "lookup"))
        assert await engine.recv() == brisvox.ToolResult(id=9, result="ok")
        [event] = await recorder.wait_for(Resumed)
        assert event == Resumed(attempt=1, previous_seq=3, seen_seq=2, down_ms=120, seq=5)
        [lost] = await recorder.wait_for(brisvox.EventsLost)
        assert lost.count == 1 and recorder.sessions[0].resumes == 1
        assert len(recorder.sessions) == 1  # no second on_session
        assert [start.seq for start in starts] == [5]  # the handler saw the resumption's start


@aio
async def test_a_resumption_of_an_unknown_call_is_rejected_unknown_session() -> None:
    async with agent(Recorder(), resume=True) as server:
        engine = await _engine(server)
        reject = await engine.handshake(_resuming(seq=5, previous_seq=3, session_id="nobody"))
        assert reject == brisvox.SessionReject(code="unknown_session", message="no such call")


@aio
async def test_a_parked_call_expires_after_the_window() -> None:
    recorder = Recorder()
    clock, window = ScaledClock(50), 15.0  # 15 s pass in 0.3 s
    unhurried = clock.factor * DEADLINE  # a handshake timeout load never trips
    async with (
        agent(
            recorder, resume=True, resume_window=window, clock=clock, handshake_timeout=unhurried
        ) as server,
        Lateness() as late,
    ):
        engine = await _engine(server)
        await engine.handshake()
        before = time.monotonic()
        await engine.close()
        lost = time.monotonic()
        [closed] = await recorder.wait_for(LinkDown)
        ended = time.monotonic()
        assert "resume window" in closed.reason and server.calls == 0
        # never early; late by no more than the loop was: the agent's reader, its expiry timer
        # and the task it wakes, the call's handler, this test's poll
        assert clock.real_seconds(window) <= ended - before
        assert ended - lost <= clock.real_seconds(window) + late.allowance(lost, ended, hops=5)
        engine = await _engine(server)
        reject = await engine.handshake(_resuming(seq=5, previous_seq=1))
        assert isinstance(reject, brisvox.SessionReject) and reject.code == "unknown_session"


@aio
async def test_a_resumption_takes_over_a_half_open_link() -> None:
    recorder = Recorder()
    async with agent(recorder, resume=True) as server:
        old = await _engine(server)
        await old.handshake()
        new = await _engine(server)
        assert isinstance(
            await new.handshake(_resuming(seq=4, previous_seq=3)), brisvox.SessionAccept
        )
        assert await old.closed() == (1000, "superseded by a resumed link")
        await new.send(frame("user.text", 5, epoch=2, text="on the new link"))
        [text] = await recorder.wait_for(brisvox.UserText)
        assert text.text == "on the new link" and not recorder.sessions[0].closed


@aio
async def test_a_session_end_is_final_and_never_parked() -> None:
    recorder = Recorder()
    async with agent(recorder, resume=True) as server:
        engine = await _engine(server)
        await engine.handshake()
        await engine.send(frame("session.end", 2, reason="hangup"))
        await recorder.wait_for(brisvox.SessionEnd)
        await engine.close()
        engine = await _engine(server)
        reject = await engine.handshake(_resuming(seq=5, previous_seq=2))
        assert isinstance(reject, brisvox.SessionReject) and reject.code == "unknown_session"


@aio
async def test_closing_the_server_ends_parked_calls() -> None:
    recorder = Recorder()
    async with agent(recorder, resume=True) as server:
        engine = await _engine(server)
        await engine.handshake()
        await engine.close()
        async with asyncio.timeout(DEADLINE):
            while not recorder.sessions or not recorder.sessions[0].parked:
                await asyncio.sleep(0.005)
    [closed] = await recorder.wait_for(LinkDown)
    assert "closed" in closed.reason
