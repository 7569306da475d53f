"""Two agent processes sharing a real Redis: a resumption that lands on the process that does
not hold the call is relayed to the one that parked it; with no live owner it is refused."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.peers.cluster_agent import TOKEN
from tests.peers.raw import RawEngine, aio, frame, start
from tests.servers import PeerProcess, RedisServer, free_port
from tests.timing import Lateness, waited
from voxwire import brisvox

pytest.importorskip("redis", reason="the redis extra is not installed")


@dataclass
class AgentProcess:
    process: PeerProcess
    port: int

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


@pytest.fixture
def cluster(redis_server: RedisServer, tmp_path: Path) -> Iterator[dict[str, AgentProcess]]:
    redis_server.flush()
    processes = {}
    for process_id in ("A", "B"):
        port = free_port()
        module = "tests.peers.cluster_agent"
        peer = PeerProcess(
            process_id, module, process_id, str(port), redis_server.url, folder=tmp_path
        )
        processes[process_id] = AgentProcess(peer, port)
    try:
        for p in processes.values():
            p.process.wait_for(lambda line: line.get("event") == "ready", timeout=30)
        yield processes
    finally:
        for p in processes.values():
            p.process.kill()


def _resuming(seq: int, previous_seq: int, session_id: str) -> str:
    resume = {"attempt": 1, "previous_seq": previous_seq, "down_ms": 120}
    return start(seq=seq, t_ms=41200, session_id=session_id, resume=resume)


async def _park_a_call_on(owner: AgentProcess, session_id: str) -> None:
    engine = await RawEngine.open(owner.url, TOKEN)
    accept = await engine.handshake(start(session_id=session_id))
    assert isinstance(accept, brisvox.SessionAccept) and accept.resume
    await engine.send(frame("user.text", 2, epoch=1, text="before"))
    await asyncio.to_thread(owner.process.wait_for, lambda line: line.get("text") == "before")
    engine.ws.transport.abort()  # the link is lost: the call parks on its owner
    await asyncio.sleep(0.3)


@aio
async def test_a_resumption_landing_on_the_other_process_reaches_the_parked_call(
    cluster: dict[str, AgentProcess],
) -> None:
    a, b = cluster["A"], cluster["B"]
    await _park_a_call_on(a, "call-1")
    engine = await RawEngine.open(b.url, TOKEN)  # the balancer sent it to B
    accept = await engine.handshake(_resuming(seq=5, previous_seq=3, session_id="call-1"))
    assert accept == brisvox.SessionAccept(version=1, tools=[], resume=True)
    await engine.send(frame("events.lost", 6, count=2))
    await engine.send(frame("user.text", 7, epoch=2, text="after, through B"))
    resumed = await asyncio.to_thread(
        a.process.wait_for, lambda line: line.get("event") == "resumed"
    )
    assert resumed == {
        "process": "A",
        "session": "call-1",
        "event": "resumed",
        "attempt": 1,
        "seq": 5,
    }
    lost = await asyncio.to_thread(
        a.process.wait_for, lambda line: line.get("event") == "events.lost"
    )
    assert lost["count"] == 2
    await asyncio.to_thread(a.process.wait_for, lambda line: line.get("text") == "after, through B")
    await engine.close()
    assert not [
        line for line in b.process.lines if line.get("session") == "call-1"
    ]  # B held nothing


@aio
async def test_a_resumption_of_a_call_whose_owner_died_is_refused_fast(
    cluster: dict[str, AgentProcess],
) -> None:
    a, b = cluster["A"], cluster["B"]
    await _park_a_call_on(a, "call-2")
    a.process.kill()  # the owner dies with the parked call
    for wait in (0.0, 1.2):  # at once (its port refuses), and after its heartbeat expired
        await asyncio.sleep(wait)
        engine = await RawEngine.open(b.url, TOKEN)
        async with Lateness() as late:
            started, b_waited = time.monotonic(), waited(b.process.popen.pid)
            reject = await engine.handshake(_resuming(seq=5, previous_seq=3, session_id="call-2"))
            ended = time.monotonic()
            # late by what this loop was, and by what B waited for a CPU
            allowed = late.allowance(started, ended) + waited(b.process.popen.pid) - b_waited
        assert reject == brisvox.SessionReject(code="unknown_session", message="no such call")
        assert ended - started < 1.5 + allowed
        await engine.close()


@aio
async def test_a_call_nobody_parked_is_unknown_everywhere(cluster: dict[str, AgentProcess]) -> None:
    engine = await RawEngine.open(cluster["B"].url, TOKEN)
    reject = await engine.handshake(_resuming(seq=5, previous_seq=3, session_id="nobody"))
    assert isinstance(reject, brisvox.SessionReject) and reject.code == "unknown_session"
    await engine.close()
