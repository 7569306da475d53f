"""The gateway's stream through the link's bounds: a replay of up to 4096 events and a live burst
larger than the write queue both arrive whole, in order, on one link (issue 12, item 2)."""

from __future__ import annotations

import asyncio

import pytest

from tests.test_ovp_support import (
    AGENT,
    CALL,
    SESSION,
    collecting,
    eventually,
    ovp_client,
    run,
    serving,
)
from voxwire import ovp
from voxwire.clock import ScaledClock
from voxwire.ovp.gateway import GatewaySession
from voxwire.testing._faultproxy import FaultProxy


async def started(session: GatewaySession) -> None:
    session.start(CALL, AGENT)
    async for _ in session:
        pass


def burst(session: GatewaySession, count: int) -> None:
    """``count`` events at once, from one synchronous run of the application."""
    for n in range(count):
        session.send_agent_thinking(turn_id="t1", delta=f"d{n}")


@pytest.mark.parametrize(
    "missed",
    [ovp.STREAM_WINDOW_EVENTS + 1, ovp.REPLAY_BUFFER_MAX_EVENTS],
    ids=["queue+1", "buffer"],
)
def test_a_resume_replays_more_events_than_the_write_queue_holds(missed: int) -> None:
    async def main() -> None:
        clock = ScaledClock(10)
        async with serving(started, clock=clock) as gateway, FaultProxy(gateway.port) as proxy:
            client = ovp_client(proxy.url, clock, max_events=2 * missed)
            await client.connect()
            session = gateway.sessions[SESSION]
            proxy.refuse = True
            proxy.reset()
            await eventually(lambda: not session.connected)
            burst(session, missed)  # seq 1..missed while the client is away
            proxy.refuse = False
            await eventually(lambda: session.connected, timeout=10)
            session.send_agent_thinking(turn_id="t1", delta="live")
            session.end()
            seqs = [message.seq async for message in client]
            assert seqs == list(range(missed + 3))  # start, the replay, live, the end
            assert client.reconnects == 1 and client.events_lost == 0
            await client.close()

    run(main(), timeout=30)


@pytest.mark.parametrize(
    "count", [ovp.STREAM_WINDOW_EVENTS + 76, ovp.REPLAY_BUFFER_MAX_EVENTS], ids=["1100", "buffer"]
)
def test_a_live_burst_larger_than_the_write_queue_arrives_whole_on_one_link(count: int) -> None:
    async def main() -> None:
        clock = ScaledClock(10)
        async with serving(started, clock=clock) as gateway:
            client = ovp_client(gateway.url, clock, max_events=2 * count)
            await client.connect()
            session = gateway.sessions[SESSION]
            burst(session, count)
            session.end()
            seqs = [message.seq async for message in client]
            assert seqs == list(range(count + 2))
            assert client.reconnects == 0 and client.events_lost == 0
            await client.close()

    run(main(), timeout=30)


def test_a_client_send_past_the_write_queue_waits_for_room_and_nothing_is_dropped() -> None:
    got: list[ovp.ClientMessage | ovp.AudioFrame] = []

    async def main() -> None:
        async with serving(collecting(got)) as gateway:
            client = ovp_client(gateway.url, max_events=10)
            await client.connect()
            session = gateway.sessions[SESSION]
            (server_link,) = session._links.values()
            server_link.ws.transport.pause_reading()  # the gateway stops reading: buffers fill
            sent = 0

            async def flood() -> None:
                nonlocal sent
                while True:
                    await client.send_agent_input(source=ovp.InputSource.SYSTEM, text="x" * 1000)
                    sent += 1

            flooding = asyncio.create_task(flood())
            link = client._link
            assert link is not None
            before = -1
            async with asyncio.timeout(10):
                while sent != before:  # until the socket's buffers and the queue are full
                    before = sent
                    await asyncio.sleep(0.2)
            assert not flooding.done()  # the next send waits for room
            assert (
                link.outbound.waiting == ovp.STREAM_WINDOW_EVENTS and link.outbound.lost_total == 0
            )
            server_link.ws.transport.resume_reading()
            await eventually(lambda: sent > before + ovp.STREAM_WINDOW_EVENTS, timeout=10)
            flooding.cancel()
            total = sent
            await eventually(lambda: len(got) >= total, timeout=10)
            assert [item.seq for item in got] == list(range(len(got)))  # type: ignore[union-attr]
            assert client.reconnects == 0
            await client.close()

    run(main(), timeout=40)


def test_the_default_inbox_holds_a_full_replay_buffer_and_counts_one_more_event_lost() -> None:
    bound = ovp.REPLAY_BUFFER_MAX_EVENTS  # OVPClient's default max_events: a whole replay

    async def main() -> None:
        clock = ScaledClock(10)
        async with serving(started, clock=clock) as gateway:
            client = ovp_client(gateway.url, clock)
            await client.connect()  # session.start waits in the inbox: one of the bound
            burst(gateway.sessions[SESSION], bound)  # the application reads nothing meanwhile
            await eventually(lambda: client.events_lost == 1, timeout=20)
            messages = aiter(client)
            seqs = [(await anext(messages)).seq for _ in range(bound)]
            assert seqs == list(range(bound)) and client.events_lost == 1
            await client.close()

    run(main(), timeout=40)
