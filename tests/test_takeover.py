"""Sessions that outlive their process, on a real redis-server, with the gateways in one event
loop: a drained gateway hands each live session over (its state and events saved, its link
closed with 1012) and the gateway the client resumes on takes it over through the application's
``on_takeover`` hook; a gateway whose owner died takes the session over from what was saved as it
went; without the hook the takeover is refused, never started."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from tests.peers.raw import RawEngine, frame, start
from tests.servers import RedisServer, free_port
from tests.test_ovp_support import (
    AGENT,
    CALL,
    MOMENT,
    SECRET,
    eventually,
    ovp_client,
    run,
    token,
)
from voxwire import brisvox, ovp
from voxwire.brisvox.agent import AgentServer, AgentSession, Resumed
from voxwire.brisvox.engine import EngineLink, load_config
from voxwire.cluster import Owner, RedisDirectory, RedisReplayStore, connect_redis
from voxwire.errors import ConfigError
from voxwire.lifecycle import Drained
from voxwire.ovp.client import OVPClient, SessionFailed
from voxwire.ovp.gateway import Gateway, GatewayConfigError, GatewaySession
from voxwire.ovp.gateway_state import TakenOver, decode_state, encode_state, restore, snapshot
from voxwire.testing._faultproxy import FaultProxy

pytest.importorskip("redis", reason="the redis extra is not installed")

EVENTS = 60
"""Each session sends session.start, then EVENTS agent.thinking (seq 1 to EVENTS), one every
20 ms, then session.end (seq EVENTS + 1)."""


@dataclass
class App:
    """The application every gateway runs: its calls of each entry point, by gateway."""

    handled: list[str] = field(default_factory=list)
    taken_over: list[tuple[str, int]] = field(default_factory=list)

    async def stream(self, session: GatewaySession) -> None:
        # The application's own state is where the session stands: the next event's number.
        while (n := session.last_seq) < EVENTS and session.over is None:
            session.send_agent_thinking(turn_id="t1", delta=f"d{n}")
            await asyncio.sleep(0.02)
        if session.over is None:
            session.end(ovp.SessionEndReason.AGENT_ENDED)

    def handler(self, name: str) -> object:
        async def handle(session: GatewaySession) -> None:
            self.handled.append(name)
            session.start(CALL, AGENT)
            await self.stream(session)

        return handle

    def on_takeover(self, name: str) -> object:
        async def take(session: GatewaySession) -> None:
            self.taken_over.append((name, session.last_seq))
            await self.stream(session)

        return take


@contextlib.asynccontextmanager
async def _cluster(
    redis: RedisServer, app: App, *, hooks: bool = True
) -> AsyncIterator[dict[str, Gateway]]:
    """Gateways A and B, each with its directory and the shared store."""
    gateways: dict[str, Gateway] = {}
    clients = []
    for name in "AB":
        port = free_port()
        client = connect_redis(redis.url)
        clients.append(client)
        directory = RedisDirectory(
            client, Owner(name, "127.0.0.1", port), heartbeat=0.2, expiry=1.0
        )
        await directory.start()
        gateway = Gateway(
            app.handler(name),  # type: ignore[arg-type]
            secret=SECRET,
            port=port,
            directory=directory,
            store=RedisReplayStore(client),
            on_takeover=app.on_takeover(name) if hooks else None,  # type: ignore[arg-type]
        )
        await gateway.start()
        gateways[name] = gateway
    try:
        yield gateways
    finally:
        for gateway in gateways.values():
            await gateway.close()
            assert isinstance(gateway.directory, RedisDirectory)
            await gateway.directory.close()
        for client in clients:
            await client.aclose()


async def _tok(session_id: str) -> str:
    return token(session_id=session_id)


async def _collect(client: OVPClient, into: list[int]) -> None:
    async for message in client:
        into.append(message.seq)


def test_a_drained_gateway_hands_its_session_to_the_one_the_client_resumes_on(
    redis_server: RedisServer,
) -> None:
    redis_server.flush()
    app = App()

    async def main() -> tuple[list[int], Drained, int | None]:
        async with _cluster(redis_server, app) as gw, FaultProxy(gw["A"].port) as proxy:
            client = ovp_client(
                proxy.url, session_id="ovps_drained", tok=lambda: _tok("ovps_drained")
            )
            await client.connect()
            received: list[int] = []
            consumer = asyncio.create_task(_collect(client, received))
            await eventually(
                lambda: len(received) >= 20 and gw["B"].directory.seen("ovp", "ovps_drained")
            )  # type: ignore[union-attr]
            proxy.target_port = gw["B"].port  # the balancer's ring without A
            drained = await gw["A"].drain(10)
            assert "ovps_drained" not in gw["A"].sessions
            async with asyncio.timeout(10):
                await consumer
            await client.close()
            return received, drained, client.reconnects

    received, drained, reconnects = run(main(), timeout=60)
    assert received == list(range(EVENTS + 2))  # every event once, in order, across processes
    assert drained == Drained(handed_over=1, finished=0, ended=0)
    assert reconnects == 1
    assert app.handled == ["A"]
    assert len(app.taken_over) == 1 and app.taken_over[0][0] == "B"


def test_when_the_owner_dies_the_session_is_taken_over_from_what_it_saved_as_it_went(
    redis_server: RedisServer,
) -> None:
    redis_server.flush()
    app = App()

    async def main() -> list[int]:
        async with _cluster(redis_server, app) as gw, FaultProxy(gw["A"].port) as proxy:
            client = ovp_client(proxy.url, session_id="ovps_died", tok=lambda: _tok("ovps_died"))
            await client.connect()
            received: list[int] = []
            consumer = asyncio.create_task(_collect(client, received))
            await eventually(
                lambda: len(received) >= 20 and gw["B"].directory.seen("ovp", "ovps_died")
            )  # type: ignore[union-attr]
            # A dies: its heartbeat stops and nothing more leaves it (its gateway is cut off).
            assert isinstance(gw["A"].directory, RedisDirectory)
            await gw["A"].directory.close()
            proxy.refuse = True
            proxy.reset()
            await asyncio.sleep(0.05)
            proxy.target_port = gw["B"].port
            proxy.refuse = False
            async with asyncio.timeout(10):
                await consumer
            await client.close()
            return received

    received = run(main(), timeout=60)
    assert received == list(range(EVENTS + 2))
    assert app.handled == ["A"]
    assert [name for name, _ in app.taken_over] == ["B"]


def test_without_the_hook_a_session_whose_owner_is_gone_is_refused_not_started(
    redis_server: RedisServer,
) -> None:
    redis_server.flush()
    app = App()

    async def main() -> SessionFailed:
        async with (
            _cluster(redis_server, app, hooks=False) as gw,
            FaultProxy(gw["A"].port) as proxy,
        ):
            client = ovp_client(
                proxy.url, session_id="ovps_nohook", tok=lambda: _tok("ovps_nohook")
            )
            await client.connect()
            received: list[int] = []
            consumer = asyncio.create_task(_collect(client, received))
            await eventually(
                lambda: len(received) >= 10 and gw["B"].directory.seen("ovp", "ovps_nohook")
            )  # type: ignore[union-attr]
            proxy.target_port = gw["B"].port
            drained = await gw["A"].drain(0.5)  # a store, so handed over; B cannot take it
            assert drained.handed_over == 1
            with pytest.raises(SessionFailed) as failed:
                async with asyncio.timeout(10):
                    await consumer
            assert not gw["B"].sessions
            await client.close()
            return failed.value

    failure = run(main(), timeout=60)
    assert failure.code == ovp.ErrorCode.OVP_RESUME_EXPIRED
    assert "no live gateway holds the session" in failure.detail
    assert app.taken_over == [] and app.handled == ["A"]


def test_a_store_needs_a_directory() -> None:
    with pytest.raises(GatewayConfigError, match="a store needs a directory"):
        Gateway(lambda s: asyncio.sleep(0), secret=SECRET, store=object())  # type: ignore[arg-type]


def test_a_state_moves_as_bytes_and_restores_a_core_that_replays_the_resume() -> None:
    from voxwire.ovp.gateway_core import GatewayCore, ToLink
    from voxwire.ovp.gateway_tokens import verify_token
    from voxwire.sansio import SendText

    claims = verify_token(token(), SECRET, "ovps_test_1")
    core = GatewayCore("ovps_test_1", epoch=1_700_000_000.0)
    core.open_link(0.0)
    core.start(CALL, AGENT, 0.0)
    sent = [
        core.send(ovp.AgentThinking, {"turn_id": "t", "delta": f"d{n}"}, 1.0 + n) for n in range(5)
    ]
    data = [
        item.action.data
        for out in sent
        for item in out
        if isinstance(item, ToLink) and isinstance(item.action, SendText)
    ]
    state = decode_state(encode_state(snapshot(core, claims, now=10.0, wall=1_700_000_010.0)))
    taken = TakenOver(state, data[2:], 2, "")
    restored = restore(taken, now=3.0, wall=1_700_000_010.0)
    assert restored.last_seq == 5 and restored.agent == AGENT
    link, _ = restored.open_link(3.0)
    resume = ovp.SessionResume(seq=1, ts=MOMENT, session_id="ovps_test_1", last_server_seq=2)
    out = restored.receive_text(link, ovp.encode(resume), 3.0)
    replayed = [
        item.action.data
        for item in out
        if isinstance(item, ToLink) and isinstance(item.action, SendText) and item.stream
    ]
    assert replayed == data[2:]  # seq 3, 4 and 5, from the store, then the live stream


# -- the Brisvox agent side ---------------------------------------------------------------------


@dataclass
class Agent:
    """The agent application every process runs: what each entry point saw, by process."""

    seen: list[tuple[str, str]] = field(default_factory=list)
    """(process, what): "start", "takeover", each user.text's text, "resumed"."""
    said: list[str] = field(default_factory=list)
    """The ids of the say commands each process sent, in order."""
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def on_session(self, name: str, *, takeover: bool = False) -> object:
        async def run(session: AgentSession) -> None:
            self.seen.append((name, "takeover" if takeover else "start"))
            async for event in session:
                if isinstance(event, Resumed):
                    self.seen.append((name, "resumed"))
                elif isinstance(event, brisvox.UserText):
                    self.seen.append((name, event.text))
                    task = asyncio.create_task(self._say(session))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)

        return run

    async def _say(self, session: AgentSession) -> None:
        with contextlib.suppress(Exception):
            result = await session.send_say(text="Noted.")
            self.said.append(result.id)


@contextlib.asynccontextmanager
async def _agents(
    redis: RedisServer, agent: Agent, *, hooks: bool = True
) -> AsyncIterator[dict[str, AgentServer]]:
    servers: dict[str, AgentServer] = {}
    clients = []
    for name in "AB":
        port = free_port()
        client = connect_redis(redis.url)
        clients.append(client)
        directory = RedisDirectory(
            client, Owner(name, "127.0.0.1", port), heartbeat=0.2, expiry=1.0
        )
        await directory.start()
        server = AgentServer(
            agent.on_session(name),  # type: ignore[arg-type]
            token=None,
            port=port,
            resume=True,
            directory=directory,
            store=RedisReplayStore(client, prefix="voxwire:brisvox"),
            on_takeover=agent.on_session(name, takeover=True) if hooks else None,  # type: ignore[arg-type]
        )
        await server.start()
        servers[name] = server
    try:
        yield servers
    finally:
        for server in servers.values():
            await server.close()
            assert isinstance(server.directory, RedisDirectory)
            await server.directory.close()
        for client in clients:
            await client.aclose()


def _resuming(seq: int, session_id: str) -> str:
    return start(
        seq=seq,
        t_ms=41200,
        session_id=session_id,
        resume={"attempt": 1, "previous_seq": seq - 1, "down_ms": 120},
    )


async def _said(engine: RawEngine, seq: int) -> str:
    """Read the agent's say and answer it ok: its command id."""
    say = await engine.recv()
    assert isinstance(say, brisvox.Say) and isinstance(say.id, str)
    await engine.send(frame("command.result", seq, id=say.id, ok=True))
    return say.id


async def _a_call_on(server: AgentServer, session_id: str) -> RawEngine:
    engine = await RawEngine.open(server.url)
    assert isinstance(await engine.handshake(start(session_id=session_id)), brisvox.SessionAccept)
    await engine.send(frame("user.text", 2, epoch=1, text="before"))
    assert await _said(engine, 3) == "c1"
    return engine


def test_brisvox_a_drained_agent_hands_its_call_to_the_process_the_engine_resumes_on(
    redis_server: RedisServer,
) -> None:
    redis_server.flush()
    agent = Agent()

    async def main() -> tuple[Drained, tuple[int | None, str | None], object]:
        async with _agents(redis_server, agent) as servers:
            engine = await _a_call_on(servers["A"], "call-drained")
            drained = await servers["A"].drain(5)
            closed = await engine.closed()
            resumed = await RawEngine.open(servers["B"].url)  # the balancer's ring without A
            accept = await resumed.handshake(_resuming(5, "call-drained"))
            await resumed.send(frame("user.text", 6, epoch=2, text="after"))
            assert await _said(resumed, 7) == "c2"  # ids go on: never repeated in a call
            await resumed.close()
            return drained, closed, accept

    drained, closed, accept = run(main(), timeout=60)
    assert drained == Drained(handed_over=1, finished=0, ended=0)
    assert closed == (1012, "handed over: resume elsewhere")
    assert accept == brisvox.SessionAccept(version=1, tools=[], resume=True)
    assert agent.seen == [
        ("A", "start"),
        ("A", "before"),
        ("B", "takeover"),
        ("B", "resumed"),
        ("B", "after"),
    ]
    assert agent.said == ["c1", "c2"]


def test_brisvox_a_half_open_call_resumed_on_another_process_is_taken_up_by_its_owner(
    redis_server: RedisServer,
) -> None:
    """The engine lost the link, its owner did not notice (half-open): the resumption lands on
    B, which relays it to the owner A, which takes the call over from its old link."""
    redis_server.flush()
    agent = Agent()

    async def main() -> tuple[tuple[int | None, str | None], object]:
        async with _agents(redis_server, agent) as servers:
            old = await _a_call_on(servers["A"], "call-half-open")
            await asyncio.sleep(0.3)  # A's claim is in the directory
            resumed = await RawEngine.open(servers["B"].url)
            accept = await resumed.handshake(_resuming(5, "call-half-open"))
            closed = await old.closed()  # the owner closed its half-open link
            await resumed.send(frame("user.text", 6, epoch=2, text="after"))
            assert await _said(resumed, 7) == "c2"
            await resumed.close()
            return closed, accept

    closed, accept = run(main(), timeout=60)
    assert accept == brisvox.SessionAccept(version=1, tools=[], resume=True)
    assert closed == (1000, "superseded by a resumed link")
    assert agent.seen == [("A", "start"), ("A", "before"), ("A", "resumed"), ("A", "after")]


@pytest.mark.parametrize("hooks", [True, False])
def test_brisvox_when_the_owner_dies_its_call_is_taken_over_or_rejected_without_the_hook(
    redis_server: RedisServer, hooks: bool
) -> None:
    redis_server.flush()
    agent = Agent()

    async def main() -> object:
        async with _agents(redis_server, agent, hooks=hooks) as servers:
            engine = await _a_call_on(servers["A"], "call-died")
            await asyncio.sleep(0.3)  # the state saved with the command is in the store
            assert isinstance(servers["A"].directory, RedisDirectory)
            await servers["A"].directory.close()  # A dies: no owner from now on
            engine.ws.transport.abort()
            resumed = await RawEngine.open(servers["B"].url)
            answer = await resumed.handshake(_resuming(5, "call-died"))
            if hooks:
                await resumed.send(frame("user.text", 6, epoch=2, text="after"))
                assert await _said(resumed, 7) == "c2"
            await resumed.close()
            return answer

    answer = run(main(), timeout=60)
    if hooks:
        assert answer == brisvox.SessionAccept(version=1, tools=[], resume=True)
        assert agent.seen[-3:] == [("B", "takeover"), ("B", "resumed"), ("B", "after")]
    else:
        assert answer == brisvox.SessionReject(code="unknown_session", message="no such call")
        assert [name for name, _ in agent.seen] == ["A", "A"]  # nothing started on B


def test_brisvox_a_store_needs_a_directory_and_resume() -> None:
    with pytest.raises(ConfigError, match="a store needs a directory and resume=True"):
        AgentServer(lambda s: asyncio.sleep(0), store=object())  # type: ignore[arg-type]


def test_brisvox_across_two_handovers_every_event_is_seen_once_or_counted_lost(
    redis_server: RedisServer,
) -> None:
    """An engine sending an event every millisecond while its call moves A -> B -> C: what the
    agents see, in order and once, and what ``events.lost`` reports, make up every event sent
    (the second outage's report once left out the event its link still held)."""
    redis_server.flush()
    seen: list[int] = []

    async def follow(session: AgentSession) -> None:
        async for event in session:
            if isinstance(event, brisvox.UserText):
                seen.append(int(event.text))

    async def main() -> tuple[int, int]:
        servers, clients = [], []
        for name in "ABC":
            port = free_port()
            client = connect_redis(redis_server.url)
            clients.append(client)
            directory = RedisDirectory(
                client, Owner(name, "127.0.0.1", port), heartbeat=0.2, expiry=1.0
            )
            await directory.start()
            server = AgentServer(
                follow,
                token="t",
                port=port,
                resume=True,
                directory=directory,
                store=RedisReplayStore(client, prefix="voxwire:brisvox"),
                on_takeover=follow,
            )
            servers.append(await server.start())
        async with FaultProxy(servers[0].port) as proxy:  # the balancer
            config = load_config(
                environ={"BRISVOX_AGENT_URL": proxy.url, "BRISVOX_AGENT_TOKEN": "t"}
            )
            target = config.target(route=None)
            assert target is not None
            link = EngineLink(target, session_id="moving", agent="x", settings=config.settings)
            assert await link.start()
            sent = 0

            async def send() -> None:
                nonlocal sent
                while True:
                    sent += 1
                    link.send_user_text(epoch=1, text=str(sent))
                    await asyncio.sleep(0.001)

            sending = asyncio.create_task(send())
            for drained, next_one in itertools.pairwise(servers):
                await asyncio.sleep(0.3)
                proxy.target_port = next_one.port
                assert (await drained.drain(5)).handed_over == 1
            await asyncio.sleep(0.3)
            sending.cancel()
            await asyncio.sleep(0.3)
            assert link.up
            lost = link.events_lost
            await link.end("hangup")
        for server, client in zip(servers, clients, strict=True):
            await server.close()
            assert isinstance(server.directory, RedisDirectory)
            await server.directory.close()
            await client.aclose()
        return sent, lost

    sent, lost = run(main(), timeout=60)
    assert seen == sorted(set(seen))
    assert len(seen) + lost == sent and lost > 0
