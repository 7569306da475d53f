"""Faults on the link, injected by a loopback TCP proxy, and a 200-call load run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from websockets.asyncio.server import ServerConnection, serve

from tests.peers.raw import DEADLINE, TEST_DEADLINE, aio
from tests.timing import Lateness, waited
from voxwire import brisvox
from voxwire.brisvox.agent import (
    AgentServer,
    AgentSession,
    EventsDropped,
    Resumed,
    SessionClosed,
    Tool,
    ToolContext,
)
from voxwire.brisvox.engine import AgentTarget, EngineLink
from voxwire.brisvox.engine_core import AgentAccepted, LinkDown, LinkSettings, ToolOutcome
from voxwire.brisvox.outputs import HandshakeFailed
from voxwire.brisvox.testing import AgentCall
from voxwire.clock import ScaledClock
from voxwire.hosts import check_url
from voxwire.testing._faultproxy import FaultProxy


class Seen:
    """An agent that records every event and answers 'hours'."""

    def __init__(self, delay: float = 0.0) -> None:
        self.events: list[Any] = []
        self.delay = delay

    async def __call__(self, session: AgentSession) -> None:
        async for event in session:
            self.events.append(event)
            if self.delay:
                await asyncio.sleep(self.delay)
            if isinstance(event, brisvox.UserText) and "hours" in event.text:
                with contextlib.suppress(SessionClosed):  # a link lost under the command
                    await session.send_say(text="We open at noon.")

    def texts(self) -> list[str]:
        return [e.text for e in self.events if isinstance(e, brisvox.UserText)]


async def _until(predicate: Any) -> None:
    async with asyncio.timeout(DEADLINE):
        while not predicate():
            await asyncio.sleep(0.005)


def _resumed(call: AgentCall) -> bool:
    return any(isinstance(n, AgentAccepted) and n.resumed for n in call.notices)


@aio
async def test_silence_is_detected_and_the_resumption_takes_over_the_half_open_link() -> None:
    seen = Seen()
    clock = ScaledClock(100)
    unhurried = clock.factor * DEADLINE  # the (re)connections': a loaded machine never trips them
    settings = LinkSettings(connect_timeout=unhurried, handshake_timeout=unhurried)
    async with (
        AgentServer(seen, token=None, resume=True) as server,
        FaultProxy(server.port) as proxy,
        AgentCall.open(proxy.url, clock=clock, settings=settings) as call,
    ):
        call.user_says("before")
        await _until(lambda: seen.texts() == ["before"])
        proxy.blackhole()  # no FIN: the agent still holds its link, half-open
        await _until(lambda: _resumed(call))  # 30 s of silence pass in 0.3 s
        [down] = [n for n in call.notices if isinstance(n, LinkDown)]
        assert down.reason == "nothing heard for 30 s" and down.reconnect_in is not None
        call.user_says("what are your hours")
        say = await call.expect(brisvox.Say)
        assert say.text == "We open at noon."
        await _until(lambda: any(isinstance(e, Resumed) for e in seen.events))
        assert seen.texts() == ["before", "what are your hours"]
        assert proxy.accepted == 2 and server.calls == 1


@aio
async def test_after_a_reset_nothing_is_delivered_twice_or_late() -> None:
    seen = Seen()
    async with (
        AgentServer(seen, token=None, resume=True) as server,
        FaultProxy(server.port) as proxy,
        AgentCall.open(proxy.url) as call,
    ):
        call.user_says("first")
        await _until(lambda: seen.texts() == ["first"])
        proxy.reset()
        await _until(lambda: any(isinstance(n, LinkDown) for n in call.notices))
        call.user_says("said while the link was down")  # 4 events, never delivered
        await _until(lambda: _resumed(call))
        call.user_says("after")
        await _until(lambda: seen.texts() == ["first", "after"])
        lost = [e for e in seen.events if isinstance(e, brisvox.EventsLost)]
        assert [e.count for e in lost] == [4]
        seqs = [e.seq for e in seen.events if hasattr(e, "seq") and e.seq]
        assert seqs == sorted(set(seqs))  # increasing: nothing twice
        resumed = next(e for e in seen.events if isinstance(e, Resumed))
        assert resumed.previous_seq >= resumed.seen_seq


@aio
async def test_a_truncated_frame_drops_the_link_and_it_is_reopened() -> None:
    seen = Seen()
    async with (
        AgentServer(seen, token=None, resume=True) as server,
        FaultProxy(server.port) as proxy,
        AgentCall.open(proxy.url) as call,
    ):
        proxy.truncate(3)
        call.user_says("what are your hours")  # the say toward the engine is cut mid-frame
        await _until(lambda: _resumed(call))
        assert any(isinstance(n, LinkDown) for n in call.notices)
        call.user_says("hours again?")
        assert (await call.expect(brisvox.Say)).text == "We open at noon."


@aio
async def test_a_delayed_agent_misses_the_handshake_timeout() -> None:
    async with AgentServer(Seen(), token=None) as server, FaultProxy(server.port) as proxy:
        proxy.delay = 0.3
        clock = ScaledClock(20)
        link = EngineLink(
            AgentTarget(check_url(proxy.url)),
            session_id="slow",
            agent="a",
            clock=clock,
            # the upgrade is delayed too: a connect timeout load never trips
            settings=LinkSettings(connect_timeout=clock.factor * DEADLINE),
        )
        assert not await link.start()  # 2 s of handshake pass in 0.1 s
        notice = await link.next_notice()
        assert isinstance(notice, HandshakeFailed) and "handshake timeout" in notice.reason
        await link.close()


@aio
async def test_a_blackholed_connect_times_out() -> None:
    clock = ScaledClock(20)
    async with (
        AgentServer(Seen(), token=None) as server,
        FaultProxy(server.port) as proxy,
        Lateness() as late,
    ):
        proxy.delay = 5.0  # the upgrade never completes in time
        link = EngineLink(
            AgentTarget(check_url(proxy.url)), session_id="bh", agent="a", clock=clock
        )
        began = time.monotonic()
        assert not await link.start()
        ended = time.monotonic()
        assert clock.real_seconds(LinkSettings().connect_timeout) <= ended - began
        assert ended - began < 1.0 + late.allowance(began, ended, hops=4)
        notice = await link.next_notice()
        assert isinstance(notice, HandshakeFailed) and "connect failed: timed out" in notice.reason
        await link.close()


@aio
async def test_a_slow_agent_loses_events_counted_and_the_call_never_stalls() -> None:
    seen = Seen(delay=0.02)

    async def quick(ctx: ToolContext) -> object:
        return "ok"

    tool = Tool(
        brisvox.ToolDeclaration(
            name="quick", description="Quick.", parameters={}, kind=brisvox.ToolKind.READ_ONLY
        ),
        quick,
    )
    async with (
        AgentServer(seen, token=None, tools=[tool], event_queue=8) as server,
        FaultProxy(server.port) as proxy,
        AgentCall.open(proxy.url) as call,
        Lateness() as late,
    ):
        for n in range(300):
            call.event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text=f"delta {n}"))
        began = time.monotonic()
        finished = await call.tool("quick")
        ended = time.monotonic()
        assert finished.outcome is ToolOutcome.RESULT
        assert ended - began < 0.5 + late.allowance(began, ended, hops=4)
        await _until(lambda: any(isinstance(e, EventsDropped) for e in seen.events))
        dropped = sum(e.count for e in seen.events if isinstance(e, EventsDropped))
        assert dropped > 0 and call.link.up
        assert not any(isinstance(n, LinkDown) for n in call.notices)


@aio
async def test_a_65537_byte_message_from_the_agent_closes_the_link() -> None:
    async def oversized(ws: ServerConnection) -> None:
        await ws.recv()
        await ws.send(json.dumps({"type": "session.accept", "version": 1, "tools": []}))
        await ws.send(json.dumps({"type": "say", "text": "x" * (65537 - 26)}))
        await ws.wait_closed()

    async with serve(oversized, "127.0.0.1", 0, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        link = EngineLink(
            AgentTarget(check_url(f"ws://127.0.0.1:{port}")), session_id="1", agent="a"
        )
        assert await link.start()
        await _until(lambda: link.gone)
        down = [n async for n in link if isinstance(n, LinkDown)]
        assert "1009 (message too big)" in down[0].reason
        await link.close()


# -- load --------------------------------------------------------------------------------------------

CALLS = 200


@aio
async def test_200_concurrent_calls_with_every_ping_answered() -> None:
    seen = Seen()

    async def quick(ctx: ToolContext) -> object:
        return ctx.call.arguments

    # A ping every 0.5 s of real time. Every bound this test is not about as long as the test
    # may take (the tool's: the longest the spec allows), so that a loaded machine never trips
    # one; a scaled clock would shorten them all.
    unhurried = TEST_DEADLINE
    settings = LinkSettings(
        ping_interval=0.5,
        connect_timeout=unhurried,
        handshake_timeout=unhurried,
        silence_timeout=unhurried,
    )
    declaration = brisvox.ToolDeclaration(
        name="quick",
        description="Quick.",
        parameters={},
        kind=brisvox.ToolKind.READ_ONLY,
        timeout_ms=brisvox.MAX_TOOL_TIMEOUT_MS,
    )
    tool = Tool(declaration, quick)
    async with AgentServer(seen, token="load", tools=[tool], max_calls=CALLS) as server:
        links = [
            EngineLink(
                AgentTarget(check_url(server.url), "load"),
                session_id=f"load-{n}",
                agent="a",
                settings=settings,
            )
            for n in range(CALLS)
        ]
        loop, ready = asyncio.get_running_loop(), waited()
        began = loop.time()
        assert all(await asyncio.gather(*(link.start() for link in links)))
        handshakes = loop.time() - began

        async def play(link: EngineLink, n: int) -> ToolOutcome:
            for turn in range(3):
                link.send_event(brisvox.UserText(seq=0, t_ms=0, epoch=turn, text=f"call {n}"))
                await asyncio.sleep(0.5)
            return (await link.call_tool("quick", {"n": n}, call_id=f"t{n}", epoch=3)).outcome

        outcomes = await asyncio.gather(*(play(link, n) for n, link in enumerate(links)))
        assert set(outcomes) == {ToolOutcome.RESULT}
        await _until(lambda: all(link.pings >= 3 for link in links))
        await _until(lambda: all(link.pongs >= 3 for link in links))  # every ping answered
        assert all(link.up for link in links)
        await asyncio.gather(*(link.end("hangup") for link in links))
        total, allowed = loop.time() - began, waited() - ready  # a loaded machine: a CPU later
        await _until(lambda: sum(isinstance(e, brisvox.SessionEnd) for e in seen.events) == CALLS)
    assert len([e for e in seen.events if isinstance(e, brisvox.UserText)]) == 3 * CALLS
    assert total < 15.0 + allowed, (
        f"{CALLS} calls took {total:.1f} s (handshakes {handshakes:.2f} s, "
        f"{allowed:.2f} s waiting for a CPU)"
    )
    print(f"\n{CALLS} calls: handshakes {handshakes:.2f} s, whole run {total:.2f} s")


class Written:
    """A recorder that keeps what the engine wrote."""

    def __init__(self) -> None:
        self.types: list[str] = []
        self.lost = 0

    def record(self, sender: str, data: str | bytes) -> None:
        if sender == "server" and isinstance(data, str):
            message = json.loads(data)
            self.types.append(message["type"])
            if message["type"] == brisvox.EventsLost.type:
                self.lost += message["count"]

    def link(self, event: str) -> None:
        pass


@aio
async def test_events_lost_counts_each_event_the_agent_never_got_once() -> None:
    sent, written = 3000, Written()
    async with (
        AgentServer(Seen(), token=None, resume=True) as server,
        FaultProxy(server.port) as proxy,
        AgentCall.open(
            proxy.url,
            clock=ScaledClock(20),  # the 2 s drain timeout passes in 0.1 s
            settings=LinkSettings(event_queue=64),
            record=written,
        ) as call,
    ):
        proxy.stall()  # the writer blocks, the queue fills and drops; then the link goes down
        for n in range(sent):
            call.event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text=f"{n:04} " + "x" * 4000))
            if n % 100 == 0:
                await asyncio.sleep(0.01)
        await _until(lambda: _resumed(call))
        await _until(lambda: _resumed(call) and call.link.up and not call.link.pending)
        delivered = written.types.count(brisvox.BotText.type)
        assert 0 < written.lost == sent - delivered
        assert call.link.events_lost == written.lost
