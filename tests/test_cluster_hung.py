"""A hung Redis (a real redis-server stopped with SIGSTOP: it takes connections and never
answers): a new session starts with no added delay on either protocol, because nothing of a new
session waits on Redis, and a resume that needs the directory is refused within the peer's bound
(the Brisvox engine's 2 s handshake), never left waiting. A resume that cannot be relayed starts
nothing on the process it reached: no handler, no claim, no ``session.start``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from tests.peers.raw import RawEngine, frame, start
from tests.servers import RedisServer, free_port, start_redis
from tests.test_cluster_stores import _client
from tests.test_ovp_support import (
    AGENT,
    CALL,
    SECRET,
    event,
    eventually,
    ovp_client,
    raw_connect,
    run,
    token,
)
from tests.timing import Lateness
from voxwire import brisvox, ovp
from voxwire.brisvox.agent import AgentServer, AgentSession
from voxwire.cluster import Owner, RedisDirectory, connect_redis
from voxwire.cluster.directory import LOOKUP_BUDGET_S
from voxwire.ovp.client import SessionFailed
from voxwire.ovp.gateway import Gateway, GatewaySession
from voxwire.testing._faultproxy import FaultProxy

pytest.importorskip("redis", reason="the redis extra is not installed")

ENGINE_HANDSHAKE_S = 2.0
"""The Brisvox engine's handshake bound: an answer later than this is no answer."""


@pytest.fixture(scope="module")
def hung_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of this module's own, which a test may stop (:func:`_hung`)."""
    yield from start_redis(tmp_path_factory.mktemp("hung-redis"))


@contextlib.contextmanager
def _hung(server: RedisServer) -> Iterator[None]:
    """Redis stops answering (SIGSTOP), and answers again afterwards, whatever happened."""
    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.process.send_signal(signal.SIGCONT)


class Node:
    """One process's directory, as a gateway or an agent server holds it."""

    def __init__(self, name: str, server: RedisServer) -> None:
        self.port = free_port()
        self.directory = RedisDirectory(
            connect_redis(server.url),
            Owner(name, "127.0.0.1", self.port),
            heartbeat=0.2,
            expiry=1.0,
        )


@contextlib.asynccontextmanager
async def _gateways(server: RedisServer, calls: dict[str, int]) -> AsyncIterator[list[Gateway]]:
    """Gateways A and B, one directory each; every session streams an event every 20 ms until
    the client goes; ``calls`` counts the handler's calls per gateway."""
    gateways = []
    for name in "AB":
        node = Node(name, server)

        async def handler(session: GatewaySession, name: str = name) -> None:
            calls[name] = calls.get(name, 0) + 1
            session.start(CALL, AGENT)
            while session.over is None:
                session.send_agent_thinking(turn_id="t1", delta="d")
                await asyncio.sleep(0.02)

        await node.directory.start()
        gateway = Gateway(handler, secret=SECRET, port=node.port, directory=node.directory)
        await gateway.start()
        gateways.append(gateway)
    try:
        yield gateways
    finally:
        for gateway in gateways:
            await gateway.close()
            assert isinstance(gateway.directory, RedisDirectory)
            await gateway.directory.close()


async def _tok(session_id: str) -> str:
    return token(session_id=session_id)


def test_ovp_with_redis_hung_a_new_session_starts_at_once_and_a_resume_elsewhere_is_refused_fast(
    hung_redis: RedisServer,
) -> None:
    hung_redis.flush()
    calls: dict[str, int] = {}

    async def main() -> tuple[float, float, float, SessionFailed]:
        async with _gateways(hung_redis, calls) as (a, b), FaultProxy(a.port) as proxy:
            old = ovp_client(proxy.url, session_id="ovps_old", tok=lambda: _tok("ovps_old"))
            await old.connect()
            assert b.directory is not None
            await eventually(lambda: b.directory.seen("ovp", "ovps_old"))  # type: ignore[union-attr]
            with _hung(hung_redis):
                async with Lateness() as late:
                    began = time.monotonic()
                    new = ovp_client(a.url, session_id="ovps_new")
                    await new.connect()  # session.start, with Redis hung
                    started = time.monotonic() - began
                    new_allowed = late.allowance(began, time.monotonic(), hops=4)
                    # The old session's link drops; its resume lands on B, which holds nothing.
                    proxy.target_port = b.port
                    began = time.monotonic()
                    proxy.reset()
                    with pytest.raises(SessionFailed) as failed:
                        async with asyncio.timeout(10):
                            async for _ in old:
                                pass
                    refused = time.monotonic() - began
                    allowed = late.allowance(began, time.monotonic(), hops=6)
                await new.close()
                await old.close()
        return started, new_allowed, refused - allowed, failed.value

    started, allowed, refused, failure = run(main(), timeout=60)
    assert started < 0.3 + allowed  # a hung Redis call alone takes 1 s: none was waited on
    assert failure.code == ovp.ErrorCode.OVP_RESUME_EXPIRED
    assert refused < LOOKUP_BUDGET_S + 0.5  # the directory's budget, then the refusal at once
    assert calls == {"A": 2}  # no phantom on B: its handler never ran


@pytest.mark.parametrize("owner", ["gone", "unreachable"])
def test_ovp_a_resume_that_cannot_be_relayed_starts_nothing_where_it_landed(
    hung_redis: RedisServer, owner: str
) -> None:
    """The owner's heartbeat stopped (gone), or it is alive in the directory but its port
    refuses the relay (unreachable): the resume is refused before anything starts on B."""
    hung_redis.flush()
    calls: dict[str, int] = {}
    session_id = f"ovps_phantom_{owner}"

    async def main() -> tuple[list[dict[str, Any]], int | None, list[str], bytes | None]:
        async with _gateways(hung_redis, calls) as (a, b):
            client = ovp_client(a.url, session_id=session_id, tok=lambda: _tok(session_id))
            await client.connect()
            assert b.directory is not None
            await eventually(lambda: b.directory.seen("ovp", session_id))  # type: ignore[union-attr]
            assert isinstance(a.directory, RedisDirectory)
            if owner == "gone":
                await a.directory.close()  # A's heartbeat stops: within 1 s it is no owner
                await asyncio.sleep(1.2)
            else:
                assert a._server is not None
                a._server.close()  # A listens no more; its heartbeat goes on
            ws = await raw_connect(f"{b.url}/voice/ws/{session_id}?token={token(session_id)}")
            await ws.send(event("session.resume", 7, session_id=session_id, last_server_seq=3))
            answers = []
            with contextlib.suppress(ConnectionClosed):
                async for text in ws:
                    answers.append(json.loads(text))
            held_by_b = list(b.sessions)
            async with _client(hung_redis) as redis:
                fence = await redis.get(f"voxwire:fence:ovp:{session_id}")
            await client.close()
        return answers, ws.close_code, held_by_b, fence

    answers, code, held_by_b, fence = run(main(), timeout=60)
    assert [(a["type"], a["code"], a["seq"]) for a in answers] == [
        ("error", ovp.ErrorCode.OVP_RESUME_EXPIRED, 4)
    ]  # no session.start, no event: one refusal, outside the stream
    assert code == 1008
    assert held_by_b == []
    assert calls == {"A": 1}  # B's handler never ran
    assert fence == b"1"  # one claim ever, A's: B claimed nothing


# -- the Brisvox agent side ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _agents(server: RedisServer) -> AsyncIterator[list[AgentServer]]:
    servers = []
    for name in "AB":
        node = Node(name, server)

        async def on_session(session: AgentSession) -> None:
            async for _ in session:
                pass

        await node.directory.start()
        agent = AgentServer(
            on_session, token=None, port=node.port, resume=True, directory=node.directory
        )
        await agent.start()
        servers.append(agent)
    try:
        yield servers
    finally:
        for agent in servers:
            await agent.close()
            assert isinstance(agent.directory, RedisDirectory)
            await agent.directory.close()


def _resuming(session_id: str) -> str:
    resume = {"attempt": 1, "previous_seq": 3, "down_ms": 120}
    return start(seq=5, t_ms=41200, session_id=session_id, resume=resume)


def test_brisvox_with_redis_hung_a_new_call_is_taken_at_once_and_a_resumption_refused_in_time(
    hung_redis: RedisServer,
) -> None:
    hung_redis.flush()

    async def main() -> tuple[float, float, float, brisvox.AgentMessage]:
        async with _agents(hung_redis) as (a, b):
            parked = await RawEngine.open(a.url)
            assert isinstance(
                await parked.handshake(start(session_id="parked")), brisvox.SessionAccept
            )
            await parked.send(frame("user.text", 2, epoch=1, text="hello"))
            parked.ws.transport.abort()  # the call parks on A, claimed in the directory
            await asyncio.sleep(0.3)
            with _hung(hung_redis):
                async with Lateness() as late:
                    began = time.monotonic()
                    new = await RawEngine.open(b.url)
                    accept = await new.handshake(start(session_id="new"))
                    taken = time.monotonic() - began
                    taken_allowed = late.allowance(began, time.monotonic(), hops=4)
                    assert isinstance(accept, brisvox.SessionAccept)
                    engine = await RawEngine.open(b.url)
                    began = time.monotonic()
                    answer = await engine.handshake(_resuming("parked"))
                    refused = time.monotonic() - began
                    allowed = late.allowance(began, time.monotonic(), hops=4)
                await new.close()
                await engine.close()
        return taken, taken_allowed, refused - allowed, answer

    taken, allowed, refused, answer = run(main(), timeout=60)
    assert taken < 0.3 + allowed
    assert answer == brisvox.SessionReject(code="unknown_session", message="no such call")
    assert refused < ENGINE_HANDSHAKE_S - 0.5  # answered well within the engine's bound
