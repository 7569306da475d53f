"""Several OVP gateway processes: on a real Redis with the owner directory, and behind a real
HAProxy hashing the path. A client dropped and resumed onto another process gets every event
exactly once and in order; a resume whose owner is gone is refused fast; Redis away, new
sessions still work."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.peers.cluster_gateway import EVENTS
from tests.servers import PeerProcess, RedisServer, free_port, start_haproxy
from tests.test_ovp_support import eventually, ovp_client, token
from tests.timing import Lateness, waited
from voxwire import ovp
from voxwire.ovp.client import OVPClient, SessionFailed
from voxwire.testing._faultproxy import FaultProxy

pytest.importorskip("redis", reason="the redis extra is not installed")

LAST_SEQ = EVENTS + 1
"""session.start is seq 0, the events 1 to EVENTS, session.end EVENTS + 1."""


@dataclass
class GatewayProcess:
    process: PeerProcess
    port: int


def _start_gateways(names: str, folder: Path, redis_url: str | None) -> dict[str, GatewayProcess]:
    gateways = {}
    for name in names:
        port = free_port()
        args = [name, str(port), *(["--redis", redis_url] if redis_url else [])]
        peer = PeerProcess(name, "tests.peers.cluster_gateway", *args, folder=folder)
        gateways[name] = GatewayProcess(peer, port)
    for g in gateways.values():
        g.process.wait_for(lambda line: line.get("event") == "ready", timeout=30)
    return gateways


@pytest.fixture
def three_gateways(
    redis_server: RedisServer, tmp_path: Path
) -> Iterator[dict[str, GatewayProcess]]:
    redis_server.flush()
    gateways = _start_gateways("ABC", tmp_path, redis_server.url)
    try:
        yield gateways
    finally:
        for g in gateways.values():
            g.process.kill()


async def _consume(client: OVPClient, received: list[int]) -> None:
    async for message in client:
        received.append(message.seq)


async def _drop_and_move(proxy: FaultProxy, port: int) -> None:
    """The client's link breaks, and its next connection lands on the gateway at ``port``."""
    proxy.refuse = True
    proxy.reset()
    await asyncio.sleep(0.05)
    proxy.target_port = port
    proxy.refuse = False


@pytest.mark.parametrize("processes", [2, 3])
def test_a_client_resumed_onto_other_gateways_gets_every_event_once_in_order(
    three_gateways: dict[str, GatewayProcess], processes: int
) -> None:
    session_id = f"ovps_cluster_{processes}"
    gateways = list(three_gateways.values())[:processes]

    async def main() -> list[int]:
        proxy = FaultProxy(gateways[0].port)
        await proxy.start()
        client = ovp_client(
            f"ws://127.0.0.1:{proxy.port}", session_id=session_id, tok=lambda: _token(session_id)
        )
        received: list[int] = []
        await client.connect()
        consumer = asyncio.create_task(_consume(client, received))
        for other in gateways[1:]:
            count = 20 * gateways.index(other)
            await eventually(lambda n=count: len(received) >= n or consumer.done(), timeout=10)
            await _drop_and_move(proxy, other.port)
        async with asyncio.timeout(20):
            await consumer
        await client.close()
        await proxy.close()
        return received

    received = asyncio.run(asyncio.wait_for(main(), 60))
    assert received == list(range(LAST_SEQ + 1))  # every event, once, in order
    owner = gateways[0].process
    assert [line["session"] for line in owner.lines if line.get("event") == "session"] == [
        session_id
    ]
    for other in gateways[1:]:
        assert not [line for line in other.process.lines if line.get("event") == "session"]
        assert f"session {session_id}: held by A; relaying the connection" in other.process.stderr()


async def _token(session_id: str) -> str:
    return token(session_id=session_id)


def test_a_resume_whose_owner_died_is_refused_fast(
    three_gateways: dict[str, GatewayProcess],
) -> None:
    a, b = three_gateways["A"], three_gateways["B"]
    session_id = "ovps_owner_dies"

    async def main() -> tuple[SessionFailed, float, float]:
        proxy = FaultProxy(a.port)
        await proxy.start()
        client = ovp_client(
            f"ws://127.0.0.1:{proxy.port}", session_id=session_id, tok=lambda: _token(session_id)
        )
        received: list[int] = []
        await client.connect()
        consumer = asyncio.create_task(_consume(client, received))
        await eventually(lambda: len(received) >= 10 or consumer.done(), timeout=10)
        a.process.kill()  # the owner dies with the session
        await _drop_and_move(proxy, b.port)
        async with Lateness() as late:
            started, b_waited = time.monotonic(), waited(b.process.popen.pid)
            with pytest.raises(SessionFailed) as failed:
                async with asyncio.timeout(10):
                    await consumer
            ended = time.monotonic()
            # late by what this loop was, and by what B waited for a CPU
            allowed = late.allowance(started, ended) + waited(b.process.popen.pid) - b_waited
        await client.close()
        await proxy.close()
        return failed.value, ended - started, allowed

    failure, elapsed, allowed = asyncio.run(asyncio.wait_for(main(), 60))
    assert failure.code == ovp.ErrorCode.OVP_RESUME_EXPIRED
    assert elapsed < 5.0 + allowed  # refused, never left waiting for the window


def test_with_redis_away_new_sessions_still_work(tmp_path: Path) -> None:
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    gateways = _start_gateways("A", tmp_path, dead_redis)
    try:

        async def main() -> list[int]:
            session_id = "ovps_no_redis"
            client = ovp_client(
                f"ws://127.0.0.1:{gateways['A'].port}",
                session_id=session_id,
                tok=lambda: _token(session_id),
            )
            received: list[int] = []
            await client.connect()
            async with asyncio.timeout(20):
                await _consume(client, received)
            await client.close()
            return received

        assert asyncio.run(asyncio.wait_for(main(), 60)) == list(range(LAST_SEQ + 1))
        assert "the owner directory was not updated" in gateways["A"].process.stderr()
    finally:
        gateways["A"].process.kill()


def test_behind_haproxy_hashing_the_path_resumes_land_on_the_owner_without_relay(
    tmp_path: Path,
) -> None:
    gateways = _start_gateways("AB", tmp_path, None)  # no directory: affinity alone
    haproxy_folder = tmp_path / "haproxy"
    haproxy_folder.mkdir()
    balancer = start_haproxy(haproxy_folder, [g.port for g in gateways.values()])
    lb = next(balancer)
    try:

        async def one(session_id: str) -> list[int]:
            proxy = FaultProxy(lb.port)
            await proxy.start()
            client = ovp_client(
                f"ws://127.0.0.1:{proxy.port}",
                session_id=session_id,
                tok=lambda: _token(session_id),
            )
            received: list[int] = []
            await client.connect()
            consumer = asyncio.create_task(_consume(client, received))
            for round_ in (1, 2):
                count = 25 * round_
                await eventually(lambda n=count: len(received) >= n or consumer.done(), timeout=10)
                await _drop_and_move(proxy, lb.port)  # a new upgrade, a new token, same path
            async with asyncio.timeout(20):
                await consumer
            await client.close()
            await proxy.close()
            return received

        async def main() -> list[list[int]]:
            return list(await asyncio.gather(*(one(f"ovps_lb_{n}") for n in range(4))))

        for received in asyncio.run(asyncio.wait_for(main(), 90)):
            assert received == list(range(LAST_SEQ + 1))
        served = {
            name: [line["session"] for line in g.process.lines if line.get("event") == "session"]
            for name, g in gateways.items()
        }
        assert sorted(s for sessions in served.values() for s in sessions) == [
            f"ovps_lb_{n}" for n in range(4)
        ]
        for g in gateways.values():
            assert "relaying" not in g.process.stderr()
    finally:
        balancer.close()
        for g in gateways.values():
            g.process.kill()
