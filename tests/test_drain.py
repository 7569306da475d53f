"""Draining a server, on one process over loopback sockets: readiness goes false at once, new
sessions are refused before the upgrade, the sessions held go on (resumes included) until they
end or the deadline ends them explicitly; ``close()`` ends sessions cleanly, not with 1011."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.peers.cluster_gateway import EVENTS
from tests.peers.raw import RawEngine, frame, start
from tests.servers import PeerProcess, free_port
from tests.test_endpoints import http_get
from tests.test_ovp_support import (
    AGENT,
    CALL,
    SECRET,
    endpoint,
    eventually,
    fast_clock,
    next_event,
    ovp_client,
    patient,
    raw_connect,
    run,
    serving,
    token,
)
from tests.timing import Lateness
from voxwire import brisvox, ovp
from voxwire.brisvox.agent import AgentServer, AgentSession
from voxwire.clock import Clock
from voxwire.errors import HandshakeError
from voxwire.lifecycle import Drained
from voxwire.ovp.client import OVPClient
from voxwire.ovp.gateway import Gateway, GatewaySession
from voxwire.testing._faultproxy import FaultProxy


async def _until_bye(session: GatewaySession) -> None:
    """A session that ends when the client says "bye" (one dtmf key), and not before."""
    session.start(CALL, AGENT)
    async for item in session:
        if isinstance(item, ovp.DtmfSend):
            session.end(ovp.SessionEndReason.CALLER_HANGUP)


async def _consume(client: OVPClient, into: list[ovp.ServerMessage]) -> None:
    async for message in client:
        into.append(message)


def test_a_draining_gateway_is_unready_refuses_new_sessions_and_serves_its_own() -> None:
    async def main() -> None:
        async with serving(_until_bye) as gateway, FaultProxy(gateway.port) as proxy:
            client = ovp_client(proxy.url, session_id="ovps_held", tok=lambda: _tok("ovps_held"))
            await client.connect()
            received: list[ovp.ServerMessage] = []
            consumer = asyncio.create_task(_consume(client, received))
            assert (await http_get(gateway.port, "/readyz"))[0] == 200
            drain = asyncio.create_task(gateway.drain(60))
            await eventually(lambda: not gateway.endpoints.ready)
            assert (await http_get(gateway.port, "/readyz"))[0] == 503
            newcomer = ovp_client(gateway.url, session_id="ovps_new")
            with pytest.raises(HandshakeError) as refused:
                await newcomer.connect()
            assert refused.value.status == 503
            assert "ovps_new" not in gateway.sessions
            # The session held goes on: a resume of it is served while the drain waits.
            proxy.reset()
            await eventually(lambda: client.reconnects == 1)
            assert not drain.done()
            await client.send_dtmf(digits="1")
            assert await asyncio.wait_for(drain, 10) == Drained(0, 1, 0)
            await consumer
            assert isinstance(received[-1], ovp.SessionEnd)
            assert received[-1].reason == ovp.SessionEndReason.CALLER_HANGUP
            await client.close()

    run(main(), timeout=30)


async def _tok(session_id: str) -> str:
    return token(session_id=session_id)


def test_at_the_deadline_a_drain_ends_what_is_left_with_session_end() -> None:
    clock = fast_clock()
    deadline = 20.0  # of the clock: 0.4 s of real time

    async def main() -> tuple[float, float, Drained, list[ovp.ServerMessage]]:
        async with serving(_until_bye, clock=clock) as gateway:
            client = ovp_client(gateway.url, clock)
            await client.connect()
            received: list[ovp.ServerMessage] = []
            consumer = asyncio.create_task(_consume(client, received))
            async with Lateness() as late:
                began, real = clock.now(), time.monotonic()
                drained = await gateway.drain(deadline)
                took = clock.now() - began
                allowed = late.allowance(real, time.monotonic(), hops=2)
            await asyncio.wait_for(consumer, 5)
            await client.close()
            return took, allowed / clock.real_seconds(1.0), drained, received

    took, allowed, drained, received = run(main(), timeout=30)
    assert drained == Drained(handed_over=0, finished=0, ended=1)
    assert deadline <= took <= deadline + allowed + patient(clock)["write_timeout"]
    end = received[-1]
    assert isinstance(end, ovp.SessionEnd) and end.reason == ovp.SessionEndReason.CANCELLED


def test_close_ends_a_live_session_with_session_end_and_1000_at_once() -> None:
    async def main() -> tuple[float, float, dict[str, object], int | None]:
        gateway = Gateway(_until_bye, secret=SECRET, **patient(fast_clock()))
        await gateway.start()
        ws = await raw_connect(endpoint(gateway))
        assert (await next_event(ws))["type"] == "session.start"
        async with Lateness() as late:
            began = time.monotonic()
            await gateway.close()
            took = time.monotonic() - began
            allowed = late.allowance(began, time.monotonic(), hops=4)
        end = await next_event(ws)
        await ws.wait_closed()
        return took, allowed, end, ws.close_code

    took, allowed, end, code = run(main(), timeout=30)
    assert (end["type"], end["reason"]) == ("session.end", ovp.SessionEndReason.CANCELLED)
    assert code == 1000  # a clean end, not 1011
    assert took < 0.5 + allowed  # the client answers the close: nothing waits for a timeout


def test_close_aborts_a_session_that_never_started() -> None:
    """Without session.start there is no session.end to send: the abort stays."""
    started = asyncio.Event()

    async def never_starts(session: GatewaySession) -> None:
        started.set()
        await asyncio.Event().wait()

    async def main() -> int | None:
        gateway = Gateway(never_starts, secret=SECRET)
        await gateway.start()
        ws = await raw_connect(endpoint(gateway))
        await started.wait()
        await gateway.close()
        await ws.wait_closed()
        return ws.close_code

    assert run(main()) == 1011


# -- the Brisvox agent side ---------------------------------------------------------------------


def _agent(clock: Clock | None = None) -> AgentServer:
    async def on_session(session: AgentSession) -> None:
        async for _ in session:
            pass

    return AgentServer(on_session, token=None, resume=True, **({"clock": clock} if clock else {}))


def test_a_draining_agent_refuses_new_calls_before_the_upgrade_once_it_holds_none() -> None:
    async def main() -> None:
        async with _agent() as server:
            drain = asyncio.create_task(server.drain(60))
            assert await asyncio.wait_for(drain, 5) == Drained(0, 0, 0)
            assert (await http_get(server.port, "/readyz"))[0] == 503
            assert (await http_get(server.port, "/", Upgrade="websocket"))[0] == 503

    run(main())


def test_a_draining_agent_rejects_a_new_call_and_serves_the_calls_it_holds() -> None:
    async def main() -> None:
        async with _agent() as server:
            held = await RawEngine.open(server.url)
            assert isinstance(await held.handshake(start(session_id="held")), brisvox.SessionAccept)
            drain = asyncio.create_task(server.drain(60))
            await eventually(lambda: not server.endpoints.ready)
            newcomer = await RawEngine.open(server.url)
            reject = await newcomer.handshake(start(session_id="new"))
            assert isinstance(reject, brisvox.SessionReject)
            assert reject.code == brisvox.ErrorCode.UNAVAILABLE
            await newcomer.close()
            assert not drain.done()
            await held.send(frame("session.end", 2, reason="hangup"))
            assert await asyncio.wait_for(drain, 5) == Drained(0, 1, 0)
            await held.close()

    run(main())


def test_at_the_deadline_a_draining_agent_closes_the_links_of_its_calls() -> None:
    clock = fast_clock()

    async def main() -> tuple[Drained, int | None, float]:
        async with _agent(clock) as server:
            held = await RawEngine.open(server.url)
            assert isinstance(await held.handshake(start(session_id="held")), brisvox.SessionAccept)
            began = clock.now()
            drained = await server.drain(20.0)
            took = clock.now() - began
            await asyncio.wait_for(held.ws.wait_closed(), 5)
            assert server.calls == 0  # ended, not parked
            return drained, held.ws.close_code, took

    drained, code, took = run(main())
    assert drained == Drained(handed_over=0, finished=0, ended=1)
    assert code == 1000
    assert took >= 20.0


# -- SIGTERM, when voxwire runs the process -----------------------------------------------------


def test_sigterm_drains_a_gateway_process_and_its_session_ends_as_scripted(
    tmp_path: Path,
) -> None:
    port = free_port()
    peer = PeerProcess("A", "tests.peers.cluster_gateway", "A", str(port), folder=tmp_path)
    try:
        peer.wait_for(lambda line: line.get("event") == "ready", timeout=30)

        async def main() -> list[int]:
            client = ovp_client(f"ws://127.0.0.1:{port}", session_id="ovps_sigterm")
            await client.connect()
            received: list[ovp.ServerMessage] = []
            consumer = asyncio.create_task(_consume(client, received))
            await eventually(lambda: len(received) >= 10, timeout=10)
            peer.terminate()
            async with asyncio.timeout(2):  # out of the ring as soon as the signal is handled
                while (await http_get(port, "/readyz"))[0] != 503:
                    await asyncio.sleep(0.01)
            with pytest.raises(HandshakeError):  # and no new session
                await ovp_client(f"ws://127.0.0.1:{port}", session_id="ovps_late").connect()
            await asyncio.wait_for(consumer, 10)
            await client.close()
            return [message.seq for message in received]

        assert run(main(), timeout=30) == list(range(EVENTS + 2))  # start, events, end
        drained = peer.wait_for(lambda line: line.get("event") == "drained")
        assert drained == {"process": "A", "event": "drained", **asdict(Drained(0, 1, 0))}
        assert peer.popen.wait(timeout=10) == 0
    finally:
        peer.kill()
