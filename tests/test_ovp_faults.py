"""Faults between an OVP client and gateway (delay, blackhole, reset, truncate, refuse), on loopback.

Whatever happens to the link, the application sees every server event exactly once and in order,
or the session ends with an explicit ``OVP_RESUME_EXPIRED``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.test_ovp_support import AGENT, CALL, PCM, SESSION, eventually, ovp_client, run, serving
from tests.timing import Lateness
from voxwire import ovp
from voxwire.clock import ScaledClock
from voxwire.link import Link
from voxwire.ovp.client import OVPClient, SessionFailed
from voxwire.ovp.gateway import Gateway, GatewaySession
from voxwire.testing._faultproxy import FaultProxy

KEEPALIVE = 4.0  # clock seconds: 0.2 s of real time at 20x, so a blackhole is noticed quickly


class Call:
    """A gateway whose application talks all the time, a proxy, and a client through it."""

    def __init__(self) -> None:
        self.clock = ScaledClock(20)
        self.client_events: list[int] = []
        self.server_seqs: list[int] = []
        self.frames: list[int] = []
        self.session: GatewaySession | None = None
        self.expiry_seq: int | None = None

    async def handler(self, session: GatewaySession) -> None:
        self.session = session
        session.start(CALL, AGENT)

        async def chatter() -> None:
            n = 0
            while session.over is None:
                session.send_agent_thinking(turn_id="t1", delta=f"d{n}")
                n += 1
                await self.clock.sleep(0.5)

        talker = asyncio.create_task(chatter())
        async for item in session:
            if isinstance(item, ovp.AudioFrame):
                session.send_audio(item.pcm)
            else:
                self.client_events.append(item.seq)
        talker.cancel()

    async def run(self, faults: Callable[[FaultProxy, OVPClient], Awaitable[None]]) -> None:
        async with serving(self.handler, clock=self.clock, keepalive=KEEPALIVE) as gateway:
            proxy = FaultProxy(gateway.port)
            await proxy.start()
            client = ovp_client(f"ws://127.0.0.1:{proxy.port}", self.clock, keepalive=KEEPALIVE)
            await client.connect()
            consumer = asyncio.create_task(self.consume(client))
            talker = asyncio.create_task(self.talk(client))
            try:
                await faults(proxy, client)
                proxy.refuse, proxy.delay = False, 0.0
                await self.finish(gateway, client)
                await consumer
            except SessionFailed as failed:
                assert failed.code == "OVP_RESUME_EXPIRED", failed
            finally:
                talker.cancel()
                await client.close()
                await proxy.close()
            self.check(client)

    async def consume(self, client: OVPClient) -> None:
        async def frames() -> None:
            async for frame in client.audio():
                self.frames.append(frame.frame_seq)

        listener = asyncio.create_task(frames())
        try:
            async for message in client:
                self.server_seqs.append(message.seq)
                if getattr(message, "code", None) == "OVP_RESUME_EXPIRED":
                    self.expiry_seq = message.seq
        finally:
            listener.cancel()

    async def talk(self, client: OVPClient) -> None:
        n = 0
        while client.over is None:
            if client.connected:
                client.send_audio(PCM)
                if n % 10 == 0:
                    await client.send_dtmf(digits="5")
                n += 1
            await self.clock.sleep(ovp.FRAME_MS / 1000)

    async def finish(self, gateway: Gateway, client: OVPClient) -> None:
        session = gateway.sessions[SESSION]
        await eventually(
            lambda: (client.connected and session.connected) or session.over is not None
        )
        if session.over is None:
            session.end()

    def check(self, client: OVPClient) -> None:
        seqs = self.server_seqs
        end = client.session_end
        if end is not None:
            assert seqs[-1] == end.seq
        else:  # an explicit expiry, whose error comes after whatever was missed
            assert client.over is not None and client.over.code == "OVP_RESUME_EXPIRED"
            if self.expiry_seq is not None:
                assert seqs[-1] == self.expiry_seq
                seqs = seqs[:-1]
        assert seqs == list(range(len(seqs))), "server events lost, repeated or out of order"
        # What the gateway's application saw: strictly increasing (a drop may lose some).
        assert all(a < b for a, b in zip(self.client_events, self.client_events[1:], strict=False))
        assert all(a < b for a, b in zip(self.frames, self.frames[1:], strict=False))


async def random_faults(seed: int, proxy: FaultProxy, client: OVPClient) -> None:
    rng = random.Random(seed)
    for _ in range(8):
        await asyncio.sleep(rng.uniform(0.05, 0.15))
        fault = rng.choice(["reset", "truncate", "blackhole", "delay", "refuse"])
        if fault == "reset":
            proxy.reset()
        elif fault == "truncate":
            proxy.truncate(rng.randint(0, 700))
        elif fault == "blackhole":
            proxy.blackhole()
        elif fault == "delay":
            proxy.delay = rng.uniform(0.0, 0.005)
        else:
            proxy.refuse = True
            proxy.reset()
            await asyncio.sleep(rng.uniform(0.0, 1.0))  # up to 20 s of call time
            proxy.refuse = False


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_faults_end_with_every_event_once_in_order_or_an_explicit_expiry(seed: int) -> None:
    async def faults(proxy: FaultProxy, client: OVPClient) -> None:
        await random_faults(seed, proxy, client)

    run(Call().run(faults), timeout=30)


def test_a_blackholed_link_is_noticed_by_keepalive_and_resumed() -> None:
    call = Call()

    async def faults(proxy: FaultProxy, client: OVPClient) -> None:
        await asyncio.sleep(0.1)
        proxy.blackhole()
        await eventually(lambda: client.reconnects == 1)

    run(call.run(faults))
    assert len(call.server_seqs) > 3


def test_a_truncated_message_drops_the_link_and_the_session_resumes() -> None:
    call = Call()

    async def faults(proxy: FaultProxy, client: OVPClient) -> None:
        await asyncio.sleep(0.1)
        proxy.truncate(5)
        await eventually(lambda: client.reconnects == 1)

    run(call.run(faults))


def test_delay_keeps_everything_in_order() -> None:
    call = Call()

    async def faults(proxy: FaultProxy, client: OVPClient) -> None:
        proxy.delay = 0.003
        await asyncio.sleep(0.3)

    run(call.run(faults))
    assert call.frames == list(range(len(call.frames))) and len(call.frames) > 10


def test_an_outage_longer_than_the_window_ends_in_an_explicit_expiry() -> None:
    call = Call()

    async def faults(proxy: FaultProxy, client: OVPClient) -> None:
        proxy.refuse = True
        proxy.reset()
        await eventually(lambda: client.over is not None)

    run(call.run(faults))
    assert call.session is not None and call.session.over is not None
    assert call.session.over.code == "OVP_RESUME_EXPIRED"


class Unavailable:
    """An HTTP server that answers every upgrade with 503, as a gateway restarting behind a
    load balancer does."""

    def __init__(self) -> None:
        self.answered = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Unavailable:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            self.answered += 1
        writer.close()


async def quiet(session: GatewaySession) -> None:
    session.start(CALL, AGENT)
    async for _ in session:
        pass


@pytest.mark.parametrize("comes_back", [True, False], ids=["back", "never"])
def test_a_5xx_on_a_reconnect_is_retried_with_backoff_until_the_window_closes(
    comes_back: bool,
) -> None:
    async def main() -> None:
        clock = ScaledClock(50)
        async with (
            serving(quiet, clock=clock) as gateway,
            Unavailable() as unavailable,
            FaultProxy(gateway.port) as proxy,
        ):
            client = ovp_client(proxy.url, clock)
            await client.connect()
            proxy.target_port = unavailable.port
            proxy.reset()
            dropped = clock.now()
            await eventually(lambda: unavailable.answered >= 3)
            if comes_back:
                proxy.target_port = gateway.port
                await eventually(lambda: client.reconnects == 1)
                gateway.sessions[SESSION].end()
                assert await client.run() is not None
                return
            with pytest.raises(SessionFailed) as failed:
                await client.run()
            assert failed.value.code == "OVP_RESUME_EXPIRED"
            assert clock.now() - dropped >= ovp.RESUME_WINDOW_MS / 1000
            assert 3 <= unavailable.answered < 60  # backoff, not a busy loop

    run(main(), timeout=20)


# ----------------------------------------------------------------------------- the link's own faults


@pytest.mark.parametrize("side", ["client", "gateway"])
def test_a_writer_that_fails_takes_the_link_down_and_the_session_resumes(
    side: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception inside the writer: that link goes down visibly (logged, transport aborted),
    the client reconnects, the gateway's session waits for the resume, nothing is lost."""
    write_now = Link._write_now
    failing = {"armed": False}
    names = {"client": " to ws://", "gateway": " link 0"}

    def faulty(link: Link, frames: list[Any]) -> bool:
        if failing["armed"] and names[side] in link.name:
            failing["armed"] = False
            raise RuntimeError("injected writer fault")
        return write_now(link, frames)

    monkeypatch.setattr(Link, "_write_now", faulty)

    async def main() -> None:
        clock = ScaledClock(20)
        async with serving(quiet, clock=clock) as gateway:
            client = ovp_client(gateway.url, clock)
            await client.connect()
            session = gateway.sessions[SESSION]
            failing["armed"] = True
            if side == "client":
                await client.send_dtmf(digits="1")  # the write that fails
            else:
                session.send_agent_thinking(turn_id="t1", delta="lost with the link")
            # The client counts a reconnect once its upgrade is answered; the gateway takes the
            # connection on when its handler runs, a moment later.
            await eventually(lambda: client.reconnects == 1 and session.connected)
            assert session.over is None
            session.send_agent_thinking(turn_id="t1", delta="after")
            session.end()
            seqs = [message.seq async for message in client]
            assert seqs == list(range(session._core.last_seq + 1))  # the lost one replayed

    run(main(), timeout=20)


@pytest.mark.parametrize("side", ["client", "gateway"])
def test_a_blackholed_link_is_noticed_one_keepalive_after_the_last_sign_of_life(side: str) -> None:
    async def main() -> tuple[float, float]:
        clock = ScaledClock(10)
        async with (
            serving(quiet, clock=clock, keepalive=KEEPALIVE) as gateway,
            FaultProxy(gateway.port) as proxy,
            Lateness() as late,
        ):
            client = ovp_client(proxy.url, clock, keepalive=KEEPALIVE)
            await client.connect()
            session = gateway.sessions[SESSION]
            proxy.blackhole()
            proxy.refuse = True  # no reconnect hides the drop from the gateway
            since = time.monotonic()  # nothing was heard after this
            noticed = (
                (lambda: not client.connected)
                if side == "client"
                else (lambda: not session.connected)
            )
            await eventually(noticed, timeout=10)
            ended = time.monotonic()
            await client.close()
            # late by what the loop was: the ping's timer, the silence's, the link down, the poll
            allowed = clock.factor * late.allowance(since, ended, hops=4)
            return clock.factor * (ended - since), allowed

    took, allowed = run(main(), timeout=20)
    assert took <= KEEPALIVE + allowed, (took, allowed)  # never 2 x, nor a drain on top
