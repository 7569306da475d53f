"""Live statistics in every role: each side of a real call over loopback feeds its session's
statistics as it sends and reads, on the injectable clock.

A manual clock stands still until the test moves it, so every input of a scripted call (a known
gap, jitter, turn delay, tool call and resume) has the time the test gave it, on both sides, and
both sides' figures are compared exactly."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.test_ovp_support import AGENT, CALL, PCM, SESSION, eventually, run, serving, token
from voxwire import brisvox, ovp
from voxwire.brisvox.agent import AgentServer, AgentSession, Tool, ToolContext
from voxwire.brisvox.engine import AgentTarget, EngineLink
from voxwire.hosts import check_url
from voxwire.observe.snapshot import Snapshot
from voxwire.observe.stats import SessionStats
from voxwire.ovp.client import OVPClient
from voxwire.ovp.gateway import GatewaySession

BRISVOX_TOKEN = "live-stats-token"


class ManualClock:
    """A clock that moves only when told (``clock.t = ...``); a sleep waits until it has."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        until = self.t + max(0.0, seconds)
        while self.t < until:
            await asyncio.sleep(0.001)

    def real_seconds(self, seconds: float) -> float:
        return seconds


async def at(
    clock: ManualClock, t: float, act: Callable[[], object], seen: Callable[[], bool]
) -> None:
    """At clock time ``t``: do ``act``, and wait (the clock standing still) until ``seen``."""
    clock.t = t
    act()
    await eventually(seen)


def jitter_after(*delays_ms: float) -> float:
    """RFC 3550's J after frames each ``delay`` ms off their 20 ms schedule."""
    j = 0.0
    for d in delays_ms:
        j += (abs(d) - j) / 16
    return j


# ----------------------------------------------------------------------------------- OVP


def test_an_ovp_call_gives_both_sides_the_same_gap_jitter_turn_and_resume() -> None:
    clock = ManualClock()
    sessions: list[GatewaySession] = []
    release = asyncio.Event()

    async def handler(session: GatewaySession) -> None:
        sessions.append(session)
        session.start(CALL, AGENT)
        async for _ in session:
            pass

    async def tokens() -> str:
        if sessions and not release.is_set():  # the reconnect waits for the test
            await release.wait()
        return token()

    async def main() -> tuple[Snapshot, Snapshot]:
        async with serving(handler, clock=clock, write_timeout=30, keepalive=30) as gateway:
            client = OVPClient(gateway.url, SESSION, tokens, clock=clock, open_timeout=30)
            await client.connect()  # t = 0: session.start
            session = sessions[0]

            def frames_in() -> int:
                return session.stats.directions["client"].frames

            def sent(count: int) -> Callable[[], bool]:
                return lambda: frames_in() == count

            # Four frames, the third 5 ms late (jitter), at clock times the test sets.
            for n, t in enumerate((1.0, 1.02, 1.045, 1.06)):
                await at(clock, t, lambda: client.send_audio(PCM), sent(n + 1))
            # The caller's turn, answered 250 ms later.
            await at(
                clock,
                2.0,
                lambda: session.send_transcript_final(
                    utterance_id="utt_1",
                    speaker=ovp.Speaker.CALLER,
                    language="en-US",
                    text="Open on Sundays?",
                    confidence=0.9,
                    words=[],
                ),
                lambda: client.stats.turns == 1,
            )
            await at(
                clock,
                2.25,
                lambda: session.send_agent_thinking(turn_id="turn_1", delta="We"),
                lambda: client.stats.turns_answered == 1,
            )
            # The link drops at 3.0; meanwhile a frame is lost and an event waits for replay.
            clock.t = 3.0
            for link in list(session._links.values()):
                link.abort("cut by the test")
            await eventually(lambda: not client.connected and session.stats.link_losses == 1)
            clock.t = 3.2
            assert client.send_audio(PCM) is False  # frame 4: lost with the link
            clock.t = 3.3
            session.send_agent_thinking(turn_id="turn_1", delta=" open")
            clock.t = 3.5  # the client resumes now
            release.set()
            await eventually(lambda: session.stats.resumes == 1 and client.stats.resumes == 1)
            await eventually(lambda: client.stats.events_replayed == 1)
            await at(clock, 3.52, lambda: client.send_audio(PCM), sent(5))
            await at(clock, 4.0, lambda: session.end(), lambda: client.session_end is not None)
            await client.close()
            return client.stats, session.stats

    client, gateway = run(main(), timeout=30)
    for side in (client, gateway):
        audio = side.directions["client"]
        # frame_seq 0..3, then 5: the client built frame 4 while the link was down.
        assert (audio.frames, audio.frame_gaps, audio.frames_missing, audio.frames_late) == (
            5,
            1,
            1,
            0,
        )
        assert audio.jitter_max_ms == jitter_after(5, 5)  # frames 2 and 3; none across the drop
        assert side.turns == side.turns_answered == 1
        assert side.turn_latency.total == 0.25
        assert side.resumes == 1 and side.link_losses == 1 and side.links == 2
        assert side.resume_list[0].duration == 0.5
        assert side.started_at == 0.0
    assert client.events_replayed == 1  # the event of 3.3, sent again after the resume
    assert gateway.events_replayed == 0  # the gateway counts what it sends once, as it sends it
    # What one side sent is what the other read, message for message and byte for byte.
    for sender in ("client", "server"):
        sent, read = (client, gateway) if sender == "client" else (gateway, client)
        assert read.directions[sender].messages == sent.directions[sender].messages
        assert read.directions[sender].message_bytes == sent.directions[sender].message_bytes
    assert gateway.directions["server"].messages == 5  # start, 3 events, end


def test_the_client_frame_gap_shows_where_the_audio_was_lost() -> None:
    stats = SessionStats.of("ovp", own="client")
    with_gap = [
        ovp.AudioFrame(direction=0, frame_seq=s, rtp_timestamp=320 * s, pcm=PCM) for s in (0, 1, 3)
    ]
    for t, frame in zip((0.0, 0.02, 0.06), with_gap, strict=True):
        stats.on_frame("client", frame, t)
    direction = stats.snapshot().directions["client"]
    assert (direction.frame_gaps, direction.frames_missing) == (1, 1)


# ----------------------------------------------------------------------------------- Brisvox


def test_a_brisvox_call_gives_both_sides_the_same_turn_tool_and_resume() -> None:
    clock = ManualClock()
    sessions: list[AgentSession] = []
    tool_done = asyncio.Event()

    async def lookup(ctx: ToolContext) -> object:
        await tool_done.wait()
        return {"open": True}

    async def handler(session: AgentSession) -> None:
        sessions.append(session)
        async for _ in session:
            pass

    async def main() -> tuple[Snapshot, Snapshot]:
        declaration = brisvox.ToolDeclaration(
            name="lookup",
            description="Opening hours.",
            parameters={"type": "object", "properties": {}},
            kind=brisvox.ToolKind.READ_ONLY,
        )
        tools = [Tool(declaration, lookup)]
        async with AgentServer(
            handler, token=BRISVOX_TOKEN, clock=clock, tools=tools, resume=True
        ) as server:
            target = AgentTarget(check_url(f"ws://127.0.0.1:{server.port}"), BRISVOX_TOKEN)
            link = EngineLink(target, session_id="call-1", agent="luigi", clock=clock)
            link.on("say", lambda say: None)  # answered ok once the handler returned
            assert await link.start()  # t = 0
            await eventually(lambda: bool(sessions))
            session = sessions[0]
            # The user's turn ends at 1.0; the agent's say answers it at 1.3.
            await at(
                clock,
                1.0,
                lambda: link.send_turn_user_ended(epoch=1),
                lambda: session.stats.turns == 1,
            )
            await at(
                clock,
                1.3,
                lambda: asyncio.ensure_future(session.send_say(text="We open at noon.")),
                lambda: link.stats.turns_answered == 1,
            )
            # A tool call from 2.0 to 2.4.
            pending: list[Any] = []
            await at(
                clock,
                2.0,
                lambda: pending.append(link.call_tool("lookup", {}, call_id="k1", epoch=1)),
                lambda: session.stats.tool_calls == 1,
            )
            await at(clock, 2.4, tool_done.set, lambda: link.stats.tool_outcomes["ok"] == 1)
            # The link drops at 3.0; two events are lost meanwhile; the engine resumes at 3.5.
            clock.t = 3.0
            assert link._ws is not None
            link._ws.transport.abort()
            await eventually(lambda: session.parked and link.stats.link_losses == 1)
            link.send_turn_user_started(epoch=2)
            link.send_turn_user_ended(epoch=2)
            clock.t = 3.5
            # Both sides resumed: the engine drops (and reports) an event sent before it read
            # the agent's session.accept, so the next one waits for its side too.
            await eventually(
                lambda: session.stats.resumes == 1 and not session.parked and link.reconnects == 1
            )
            await at(
                clock,
                3.6,
                lambda: link.send_turn_user_started(epoch=3),
                lambda: session.stats.resume_list[0].events_lost == 2,
            )
            await at(clock, 4.0, lambda: asyncio.ensure_future(link.end()), lambda: session.ended)
            return link.stats, session.stats

    engine, agent = run(main(), timeout=30)
    for side in (engine, agent):
        assert side.turns == side.turns_answered == 1
        assert side.turn_latency.total == 0.3
        assert side.tool_calls == 1 and side.tool_outcomes["ok"] == 1
        assert side.tool_durations.total == 0.4
        assert side.resumes == 1 and side.link_losses == 1 and side.links == 2
        assert side.resume_list[0].duration == 0.5
    assert agent.resume_list[0].events_lost == 2 == agent.events_lost
    assert agent.directions["server"].seq_gaps == 0  # nothing lost in flight
    assert agent.directions["agent"].messages == engine.directions["agent"].messages
