"""Recordings across a dropped link: both sides write the link events, and `voxwire validate`
judges each recording clean (real sockets on loopback, a fault proxy between the peers)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

from tests.peers.raw import DEADLINE, aio
from tests.test_brisvox_faults import Seen, _resumed, _until
from tests.test_ovp_resume import talking
from tests.test_ovp_support import SESSION, eventually, ovp_client, run, serving
from voxwire import brisvox
from voxwire.brisvox.agent import AgentServer
from voxwire.brisvox.engine_core import LinkSettings
from voxwire.brisvox.testing import AgentCall
from voxwire.clock import ScaledClock
from voxwire.ovp.client import OVPClient
from voxwire.testing._faultproxy import FaultProxy
from voxwire.validate import Tally, Violation, check_capture


def _links(path: Path) -> list[str]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    return [line["link"] for line in lines if "link" in line]


async def _seqs_into(received: list[int], client: OVPClient) -> None:
    async for message in client:
        received.append(message.seq)


def _violations(path: Path) -> list[Violation]:
    tally = Tally()
    _, findings = check_capture(io.StringIO(path.read_text(encoding="utf-8")), tally)
    found = [f for f in findings if isinstance(f, Violation)]
    assert tally.messages > 5
    return found


def test_an_ovp_session_resumed_after_a_drop_records_its_links_on_both_sides(
    tmp_path: Path,
) -> None:
    gateway_capture, client_capture = tmp_path / "gateway.jsonl", tmp_path / "client.jsonl"

    async def main() -> None:
        clock = ScaledClock(50)
        received: list[int] = []
        async with (
            serving(talking, clock=clock, record=str(gateway_capture)) as gateway,
            FaultProxy(gateway.port) as proxy,
        ):
            client = ovp_client(proxy.url, clock, record=client_capture)
            await client.connect()
            session = gateway.sessions[SESSION]
            consumer = asyncio.create_task(_seqs_into(received, client))
            await client.send_agent_input(source="system", text="before")
            await eventually(lambda: len(received) == 2)  # session.start, agent.thinking
            proxy.reset()  # both sides see the connection go; the client resumes
            await eventually(lambda: client.reconnects == 1 and session.connected)
            await client.send_agent_input(source="system", text="after")
            await eventually(lambda: len(received) == 3)
            session.end()
            await consumer
            await client.close()

    run(main())
    assert _links(client_capture) == ["lost", "open"]
    assert _links(gateway_capture)[:2] == ["lost", "open"]
    assert _violations(client_capture) == []
    assert _violations(gateway_capture) == []


def test_a_brisvox_call_resumed_after_a_reset_records_its_links_on_both_sides(
    tmp_path: Path,
) -> None:
    agent_capture, engine_capture = tmp_path / "agent.jsonl", tmp_path / "engine.jsonl"
    seen = Seen()
    clock = ScaledClock(100)  # the reconnection's backoff in ms
    unhurried = clock.factor * DEADLINE  # what a loaded machine must not trip: no drop but ours
    settings = LinkSettings(
        connect_timeout=unhurried, handshake_timeout=unhurried, silence_timeout=unhurried
    )

    async def main() -> None:
        async with (
            AgentServer(seen, token=None, resume=True, record=str(agent_capture)) as server,
            FaultProxy(server.port) as proxy,
            AgentCall.open(
                proxy.url, clock=clock, settings=settings, record=engine_capture
            ) as call,
        ):
            call.user_says("before")
            await _until(lambda: seen.texts() == ["before"])
            proxy.reset()  # both sides see the connection go
            await _until(lambda: _resumed(call))
            call.user_says("what are your hours")
            await call.expect(brisvox.Say)
            await call.hang_up()

    asyncio.run(main())
    assert _links(engine_capture) == ["lost", "open"]
    assert _links(agent_capture) == ["lost", "open"]
    assert _violations(engine_capture) == []
    assert _violations(agent_capture) == []


def _times_of(path: Path, text: str) -> list[float]:
    """When each ``user.text`` saying ``text`` was recorded."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    messages = [(line["t"], json.loads(line["text"])) for line in lines if "text" in line]
    return [t for t, m in messages if m["type"] == "user.text" and m["text"] == text]


@aio
async def test_both_brisvox_sides_time_their_capture_on_the_injected_clock(tmp_path: Path) -> None:
    clock, seen = ScaledClock(100), Seen()
    agent_file, engine_file = tmp_path / "agent-{session_id}.jsonl", tmp_path / "engine.jsonl"
    async with (
        AgentServer(seen, token=None, record=agent_file, clock=clock) as server,
        AgentCall.open(server.url, session_id="c1", clock=clock, record=engine_file) as call,
    ):
        call.user_says("before")
        await _until(lambda: seen.texts() == ["before"])
        await clock.sleep(30.0)  # 0.3 s of real time
        call.user_says("after")
        await _until(lambda: seen.texts() == ["before", "after"])
    for path in (tmp_path / "agent-c1.jsonl", engine_file):
        [before], [after] = _times_of(path, "before"), _times_of(path, "after")
        assert 30.0 <= after - before < 60.0, path.name
