"""Ended OVP sessions over loopback: each id refused for as long as a token for it may be valid,
kept by one gateway task for all of them (none per session), then forgotten in the order they
ended."""

from __future__ import annotations

import contextlib

from websockets.exceptions import ConnectionClosed

from tests.test_ovp_support import (
    AGENT,
    CALL,
    endpoint,
    eventually,
    next_event,
    raw_connect,
    run,
    serving,
)
from voxwire.clock import ScaledClock
from voxwire.ovp.gateway import _TOMBSTONE_S, Gateway, GatewaySession

FIRST, SECOND = "ovps_tomb_1", "ovps_tomb_2"
GAP_S = 60.0  # clock seconds between the two ends


async def ended_at_once(session: GatewaySession) -> None:
    session.start(CALL, AGENT)  # returning ends it: session.end, close 1000


async def end_one(gateway: Gateway, session_id: str) -> tuple[GatewaySession, float]:
    """A session that starts and ends, its end delivered (the client answers the close); and
    when its session.end arrived (on the gateway's clock: before the session was over)."""
    ws = await raw_connect(endpoint(gateway, session_id))
    types = []
    with contextlib.suppress(ConnectionClosed):
        while True:
            types.append((await next_event(ws))["type"])
            ended = gateway.clock.now()
    assert types == ["session.start", "session.end"] and ws.close_code == 1000
    session = gateway.sessions[session_id]
    await eventually(lambda: session.over is not None and not session.connected)
    return session, ended


async def refused(gateway: Gateway, session_id: str) -> str:
    ws = await raw_connect(endpoint(gateway, session_id))
    with contextlib.suppress(ConnectionClosed):
        while True:
            error = await next_event(ws)
            if error["type"] == "error":
                code: str = error["code"]
                return code
    raise AssertionError("no error before the close")


def test_ended_sessions_are_refused_then_forgotten_in_order_by_one_task() -> None:
    clock = ScaledClock(200)  # the tombstone's 360 s pass in 1.8 s

    async def main() -> None:
        async with serving(ended_at_once, clock=clock) as gateway:
            first, first_ended = await end_one(gateway, FIRST)
            await clock.sleep(GAP_S)
            second, _ = await end_one(gateway, SECOND)
            for session in (first, second):  # a tombstone holds no task and no timer
                assert session._handler is None and session._timer.at is None
            reaper = gateway._reaper
            assert reaper is not None and not reaper.done()
            assert await refused(gateway, FIRST) == "OVP_RESUME_EXPIRED"

            await eventually(lambda: FIRST not in gateway.sessions, timeout=10)
            assert clock.now() - first_ended >= _TOMBSTONE_S
            assert SECOND in gateway.sessions and gateway._reaper is reaper  # still kept
            ws = await raw_connect(endpoint(gateway, FIRST))  # the id is free: a new session
            assert (await next_event(ws))["type"] == "session.start"
            await ws.close()

            await eventually(lambda: SECOND not in gateway.sessions, timeout=10)
            assert clock.now() - first_ended >= _TOMBSTONE_S + GAP_S

    run(main(), timeout=30)
