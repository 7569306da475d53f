"""Resuming a dropped OVP session: replay exactly once and in order, the 30 s window, failing closed."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from tests.test_ovp_support import (
    AGENT,
    CALL,
    SESSION,
    endpoint,
    event,
    eventually,
    next_event,
    ovp_client,
    raw_connect,
    run,
    serving,
    token,
)
from voxwire import ovp
from voxwire.clock import Clock, ScaledClock
from voxwire.ovp.client import OVPClient, SessionFailed
from voxwire.ovp.gateway import Gateway, GatewaySession
from voxwire.ovp.gateway_core import GatewayState
from voxwire.testing._faultproxy import FaultProxy


def thinking(session: GatewaySession, n: int) -> None:
    session.send_agent_thinking(turn_id="t1", delta=f"d{n}")


async def talking(session: GatewaySession) -> None:
    """Start, then send one agent.thinking for every agent.input the client sends."""
    session.start(CALL, AGENT)
    async for item in session:
        if isinstance(item, ovp.AgentInput):
            thinking(session, item.seq)


def drop(ws: ClientConnection) -> None:
    """Lose the TCP connection at once, as a network fault would."""
    ws.transport.abort()


async def resume(gateway: Gateway, session_id: str, seq: int, last: Any) -> ClientConnection:
    ws = await raw_connect(endpoint(gateway, session_id))
    with contextlib.suppress(ConnectionClosed):  # a session that is over refuses at once
        await ws.send(event("session.resume", seq, session_id, last_server_seq=last))
    return ws


async def until_closed(ws: ClientConnection) -> list[dict[str, Any]]:
    events = []
    with pytest.raises(ConnectionClosed):
        while True:
            events.append(await next_event(ws))
    return events


# ----------------------------------------------------------------------------- the client resumes


def test_the_client_resumes_and_sees_every_event_once_and_in_order() -> None:
    fresh_tokens = []

    async def token_source() -> str:
        fresh_tokens.append(token())
        return fresh_tokens[-1]

    async def main() -> None:
        clock = ScaledClock(50)
        async with serving(talking, clock=clock) as gateway:
            proxy = FaultProxy(gateway.port)
            await proxy.start()
            client = ovp_client(f"ws://127.0.0.1:{proxy.port}", clock, token_source)
            await client.connect()
            session = gateway.sessions[SESSION]
            received: list[int] = []

            async def consume() -> None:
                async for message in client:
                    received.append(message.seq)

            consumer = asyncio.create_task(consume())
            for round_ in range(3):
                await client.send_agent_input(source="system", text=f"round {round_}")
                await eventually(lambda: bool(received) and received[-1] == session._core.last_seq)
                proxy.refuse = True
                proxy.reset()
                await eventually(lambda: not session.connected)
                for n in range(5):  # sent while the client is away: kept for the replay
                    thinking(session, 100 + n)
                proxy.refuse = False
                await eventually(lambda: session.connected)
            await client.send_agent_input(source="system", text="last")
            await eventually(lambda: received[-1] == session._core.last_seq)
            session.end()
            await consumer
            assert received == list(range(session._core.last_seq + 1))
            assert client.reconnects == 3 and len(fresh_tokens) > 4  # one per attempt
            await proxy.close()

    run(main())


def test_client_seq_goes_on_across_a_resume() -> None:
    got: list[ovp.ClientMessage | ovp.AudioFrame] = []

    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        async for item in session:
            got.append(item)

    async def main() -> None:
        clock = ScaledClock(50)
        async with serving(handler, clock=clock) as gateway:
            proxy = FaultProxy(gateway.port)
            await proxy.start()
            client = OVPClient(f"ws://127.0.0.1:{proxy.port}", SESSION, token(), clock=clock)
            await client.connect()
            await client.send_dtmf(digits="1")
            await eventually(lambda: len(got) == 1)
            proxy.refuse = True
            proxy.reset()
            await eventually(lambda: not client.connected)
            sending = asyncio.create_task(client.send_dtmf(digits="2"))
            await asyncio.sleep(0.02)
            assert not sending.done()  # it waits for the resume
            proxy.refuse = False
            second = await sending
            assert second.seq == 2  # seq 1 was the session.resume
            await eventually(lambda: len(got) == 2)
            await client.close()
            await proxy.close()

    run(main())
    assert [(m.type, m.seq) for m in got if not isinstance(m, ovp.AudioFrame)] == [
        ("dtmf.send", 0),
        ("dtmf.send", 2),
    ]


def test_the_client_gives_up_when_no_connection_resumes_in_time() -> None:
    async def main() -> None:
        clock = ScaledClock(50)
        async with serving(talking, clock=clock) as gateway:
            proxy = FaultProxy(gateway.port)
            await proxy.start()
            client = OVPClient(f"ws://127.0.0.1:{proxy.port}", SESSION, token(), clock=clock)
            await client.connect()
            proxy.refuse = True
            proxy.reset()
            with pytest.raises(SessionFailed) as failed:
                async for _ in client:
                    pass
            assert failed.value.code == "OVP_RESUME_EXPIRED"
            assert proxy.accepted > 3  # it kept trying, with backoff
            session = gateway.sessions[SESSION]
            await eventually(lambda: session.over is not None)
            assert session.over is not None and session.over.code == "OVP_RESUME_EXPIRED"
            await proxy.close()

    run(main())


# ----------------------------------------------------------------------------- the window


async def resume_after(gateway: Gateway, clock: Clock, session_id: str, delay: float) -> list[Any]:
    """Start a session, drop it, resume it ``delay`` clock seconds later; what comes back."""
    ws = await raw_connect(endpoint(gateway, session_id))
    assert (await next_event(ws))["type"] == "session.start"
    await ws.send(event("agent.input", 0, session_id, source="system", text="x"))
    assert (await next_event(ws))["seq"] == 1
    session = gateway.sessions[session_id]
    drop(ws)
    await eventually(lambda: not session.connected)
    thinking(session, 2)
    await clock.sleep(delay - (clock.now() - session._core.dropped_at))  # type: ignore[operator]
    again = await resume(gateway, session_id, 1, 1)
    first = await next_event(again)
    await again.close()
    return [first, session.over]


async def window_pair(clock: Clock) -> tuple[list[Any], list[Any]]:
    async with serving(talking, clock=clock) as gateway:
        inside, outside = await asyncio.gather(
            resume_after(gateway, clock, "ovps_29", 29.0),
            resume_after(gateway, clock, "ovps_31", 31.0),
        )
        return inside, outside


def check_window(inside: list[Any], outside: list[Any]) -> None:
    replayed, over = inside
    assert replayed["type"] == "agent.thinking" and replayed["seq"] == 2 and over is None
    refused, over = outside
    assert refused["code"] == "OVP_RESUME_EXPIRED" and refused["recoverable"] is False
    # The session is gone: greater than anything the client saw, the 5 s events the gateway
    # sent while the client was away among them (a quality update and a cost tick at 5, 10,
    # ..., 30 s: seq 3 to 14).
    assert refused["seq"] == 15
    assert over is not None and over.code == "OVP_RESUME_EXPIRED"


def test_a_resume_at_29_s_succeeds_and_at_31_s_expires() -> None:
    """On a clock ten times real time: the same gateway timers as the system clock drives, 3 s."""
    check_window(*run(window_pair(ScaledClock(10)), timeout=20))


def test_an_expired_resume_closes_with_1008() -> None:
    async def main() -> tuple[list[dict[str, Any]], int | None]:
        clock = ScaledClock(100)
        async with serving(talking, clock=clock) as gateway:
            ws = await raw_connect(endpoint(gateway))
            await next_event(ws)
            drop(ws)
            session = gateway.sessions[SESSION]
            await eventually(lambda: session.over is not None)
            late = await resume(gateway, SESSION, 0, 0)
            return await until_closed(late), late.close_code

    events, code = run(main())
    assert [e["code"] for e in events] == ["OVP_RESUME_EXPIRED"] and code == 1008


# ----------------------------------------------------------------------------- failing closed


@pytest.mark.parametrize(("last", "seq"), [(-1, 2), ("1", 2), (1.0, 2), (None, 2), (99, 100)])
def test_a_malformed_or_impossible_last_server_seq_fails_closed(last: Any, seq: int) -> None:
    async def main() -> tuple[list[dict[str, Any]], int | None, Any]:
        async with serving(talking) as gateway:
            ws = await raw_connect(endpoint(gateway))
            await next_event(ws)
            await ws.send(event("agent.input", 0, source="system", text="x"))
            await next_event(ws)  # seq 1
            drop(ws)
            again = await resume(gateway, SESSION, 1, last)
            events = await until_closed(again)
            return events, again.close_code, gateway.sessions[SESSION].over

    events, code, over = run(main())
    assert [(e["code"], e["seq"]) for e in events] == [("OVP_RESUME_EXPIRED", seq)]
    assert code == 1008 and over is not None and over.code == "OVP_RESUME_EXPIRED"


def test_a_client_that_restarts_its_seq_gets_seq_regression() -> None:
    async def main() -> tuple[dict[str, Any], int | None]:
        async with serving(talking) as gateway:
            ws = await raw_connect(endpoint(gateway))
            await next_event(ws)
            for seq in range(3):
                await ws.send(event("agent.input", seq, source="system", text="x"))
                await next_event(ws)
            drop(ws)
            again = await resume(gateway, SESSION, 0, 3)  # seq starting over at 0
            answer = await next_event(again)
            await again.wait_closed()
            return answer, again.close_code

    regression, code = run(main())
    # Refused for good (decision first-event-on-a-resumed-link): an answer in the session's
    # stream would let the client resume past events it missed.
    assert regression["code"] == "OVP_SEQ_REGRESSION" and regression["recoverable"] is False
    assert code == 1008


def test_a_resume_over_a_half_open_link_takes_over_and_closes_the_old_one() -> None:
    async def main() -> tuple[int | None, list[int]]:
        async with serving(talking) as gateway:
            old = await raw_connect(endpoint(gateway))
            await next_event(old)
            await old.send(event("agent.input", 0, source="system", text="x"))
            await next_event(old)  # seq 1
            thinking(gateway.sessions[SESSION], 2)
            new = await resume(gateway, SESSION, 1, 0)
            replay = [(await next_event(new))["seq"], (await next_event(new))["seq"]]
            await until_closed(old)
            return old.close_code, replay

    code, replay = run(main())
    assert code == 1000 and replay == [1, 2]


# ----------------------------------------------------------------------------- the end, and a lost session


def test_the_end_missed_is_replayed_once_and_a_resume_after_it_was_delivered_is_refused() -> None:
    async def main() -> tuple[list[dict[str, Any]], int | None, list[dict[str, Any]], int | None]:
        async with serving(talking) as gateway, FaultProxy(gateway.port) as proxy:
            url = f"{proxy.url}/voice/ws/{SESSION}?token={token()}"
            ws = await raw_connect(url)
            await next_event(ws)
            await ws.send(event("agent.input", 0, source="system", text="x"))
            assert (await next_event(ws))["seq"] == 1
            session = gateway.sessions[SESSION]
            proxy.blackhole()  # session.end (seq 2) never reaches the client
            session.end()
            await asyncio.sleep(0.05)
            proxy.reset()
            await eventually(lambda: session._core.state is GatewayState.END_UNDELIVERED)
            again = await raw_connect(url)
            await again.send(event("session.resume", 1, last_server_seq=1))
            rest = await until_closed(again)  # the client answers the close: delivered
            await eventually(lambda: session._core.state is GatewayState.OVER)
            late = await raw_connect(url)  # a token still valid, a resume from the start
            with contextlib.suppress(ConnectionClosed):
                await late.send(event("session.resume", 2, last_server_seq=0))
            refused = await until_closed(late)
            return rest, again.close_code, refused, late.close_code

    rest, code, refused, late_code = run(main())
    assert [(e["type"], e["seq"]) for e in rest] == [("session.end", 2)] and code == 1000
    assert [(e["code"], e["seq"]) for e in refused] == [("OVP_RESUME_EXPIRED", 3)]
    assert "session.end was delivered" in refused[0]["message"] and late_code == 1008


def test_a_restarted_gateway_refuses_the_resume_and_the_client_surfaces_the_loss() -> None:
    async def main() -> None:
        clock = ScaledClock(10)
        async with (
            serving(talking, clock=clock) as first,
            serving(talking, clock=clock) as restarted,
            FaultProxy(first.port) as proxy,
        ):
            client = ovp_client(proxy.url, clock)
            await client.connect()
            for n in range(5):
                thinking(first.sessions[SESSION], n)  # seq 1..5
            received: list[int] = []
            with pytest.raises(SessionFailed) as failed:
                async for message in client:
                    received.append(message.seq)
                    if message.seq == 5:  # the gateway restarts: it holds no session
                        proxy.target_port = restarted.port
                        proxy.reset()
            assert failed.value.code == "OVP_RESUME_EXPIRED"
            assert received == list(range(6))  # nothing of the new session stitched on
            new = restarted.sessions[SESSION]
            await eventually(lambda: new.over is not None)
            assert new.over is not None and new.over.code == "OVP_RESUME_EXPIRED"
            assert "does not hold session" in new.over.detail

    run(main(), timeout=20)


def test_a_token_refused_during_a_resume_ends_the_session_with_no_further_attempt() -> None:
    """A refusal has seq 0, below what the resuming client has seen: it is still the answer
    (spec decision refusal-outside-the-stream), never a replayed duplicate and a reconnect."""
    attempts: list[str] = []

    async def token_source() -> str:  # good for the first connection, stale ever after
        attempts.append(token() if not attempts else token(lifetime_s=600))
        return attempts[-1]

    async def main() -> None:
        clock = ScaledClock(10)
        async with serving(talking, clock=clock) as gateway, FaultProxy(gateway.port) as proxy:
            client = ovp_client(proxy.url, clock, token_source)
            await client.connect()
            for n in range(5):
                thinking(gateway.sessions[SESSION], n)  # seq 1..5
            received: list[int] = []
            with pytest.raises(SessionFailed) as failed:
                async for message in client:
                    received.append(message.seq)
                    if message.seq == 5:
                        proxy.reset()  # the link drops; the resume's token is refused
            assert failed.value.code == "OVP_AUTH_FAILED"
            assert received == [0, 1, 2, 3, 4, 5, 0]  # then the refusal, delivered as it came
            await clock.sleep(2.0)  # room for any further attempt, were there one
            assert len(attempts) == 2 and client.reconnects == 1  # the refused one, no other

    run(main(), timeout=20)
