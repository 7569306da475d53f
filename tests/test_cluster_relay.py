"""The relay carries a link to its owner and back, message for message, close for close."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed, ConnectionClosedError

from tests.peers.raw import aio
from tests.servers import free_port
from tests.timing import STEP, Lateness
from voxwire.clock import SYSTEM_CLOCK, Clock, ScaledClock
from voxwire.cluster import Owner
from voxwire.cluster.relay import RelayFailed, RelayResult, relay
from voxwire.link import Keepalive
from voxwire.testing._faultproxy import FaultProxy

SUBPROTOCOL = "voxwire.orbit-voice.1.0"


@asynccontextmanager
async def owner_server(behaviour: str = "echo") -> AsyncIterator[tuple[Owner, list[object]]]:
    """An owner process: echoes each message (tagged), records the path and headers it got."""
    seen: list[object] = []

    async def handle(ws: ServerConnection) -> None:
        seen.append((ws.request.path, ws.request.headers.get("Authorization"), ws.subprotocol))
        async for message in ws:
            seen.append(message)
            if message == "crash":
                ws.transport.abort()
                return
            if message == "bye":
                await ws.close(4001, "owner says bye")
                return
            await ws.send(message if isinstance(message, bytes) else f"owner:{message}")

    async with serve(
        handle,
        "127.0.0.1",
        0,
        subprotocols=[SUBPROTOCOL],
        compression=None,  # type: ignore[list-item]
    ) as server:
        port = server.sockets[0].getsockname()[1]
        yield Owner("owner-1", "127.0.0.1", port), seen


@asynccontextmanager
async def front(
    owner: Owner, results: list[RelayResult | Exception], **options: object
) -> AsyncIterator[int]:
    """The process the link reached: relays every connection to ``owner``."""

    async def handle(ws: ServerConnection) -> None:
        try:
            results.append(await relay(ws, owner, ws.request.path, **options))  # type: ignore[arg-type]
        except RelayFailed as exc:
            results.append(exc)
            await ws.close(1008, "no owner")

    async with serve(
        handle,
        "127.0.0.1",
        0,
        subprotocols=[SUBPROTOCOL],
        compression=None,  # type: ignore[list-item]
    ) as server:
        yield server.sockets[0].getsockname()[1]


def _client(port: int, path: str = "/") -> connect:
    return connect(
        f"ws://127.0.0.1:{port}{path}",
        subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
        compression=None,
    )


@aio
async def test_messages_go_both_ways_in_order_text_and_binary() -> None:
    results: list[RelayResult | Exception] = []
    async with (
        owner_server() as (owner, seen),
        front(owner, results, headers={"Authorization": "Bearer t"}) as port,
        _client(port, "/voice/ws/s1?token=abc") as ws,
    ):
        assert ws.subprotocol == SUBPROTOCOL
        for i in range(50):
            await ws.send(f"m{i}")
            await ws.send(bytes([i]) * 652)
        got = [await ws.recv() for _ in range(100)]
        assert got[0::2] == [f"owner:m{i}" for i in range(50)]
        assert got[1::2] == [bytes([i]) * 652 for i in range(50)]
        await ws.close(1000, "client done")
        await asyncio.sleep(0.05)
    assert seen[0] == ("/voice/ws/s1?token=abc", "Bearer t", SUBPROTOCOL)
    assert results == [RelayResult(100, 100, "client")]


@aio
async def test_what_was_read_already_goes_first() -> None:
    results: list[RelayResult | Exception] = []
    async with (
        owner_server() as (owner, seen),
        front(owner, results, first=['{"type":"session.start"}']) as port,
        _client(port) as ws,
    ):
        assert await ws.recv() == 'owner:{"type":"session.start"}'
        await ws.send("next")
        assert await ws.recv() == "owner:next"
    assert seen[1:3] == ['{"type":"session.start"}', "next"]


@aio
async def test_the_owners_close_reaches_the_client_with_its_code() -> None:
    results: list[RelayResult | Exception] = []
    async with owner_server() as (owner, _), front(owner, results) as port, _client(port) as ws:
        await ws.send("bye")
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4001, "owner says bye")
    assert isinstance(results[0], RelayResult) and results[0].closed_by == "owner"


@aio
async def test_an_owner_that_drops_mid_call_drops_the_client() -> None:
    results: list[RelayResult | Exception] = []
    async with owner_server() as (owner, _), front(owner, results) as port, _client(port) as ws:
        await ws.send("crash")
        with pytest.raises(ConnectionClosedError) as closed:
            await ws.recv()
        assert closed.value.rcvd is None  # no close frame: a drop the client may resume after
    assert isinstance(results[0], RelayResult) and results[0].closed_by == "drop"


@aio
async def test_an_owner_that_is_gone_fails_fast_before_anything_is_relayed() -> None:
    results: list[RelayResult | Exception] = []
    dead = Owner("dead", "127.0.0.1", free_port())
    async with Lateness() as late:
        started = time.monotonic()
        async with front(dead, results) as port, _client(port) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        ended = time.monotonic()
    assert ended - started < 2.0 + late.allowance(started, ended, hops=4)
    assert isinstance(results[0], RelayFailed) and "owner dead" in str(results[0])


@pytest.mark.parametrize(
    ("keepalive", "clock"),
    [
        (Keepalive(ping_interval=0.1, silence_timeout=0.3, now=0.0), SYSTEM_CLOCK),
        # the same in real time
        (Keepalive(ping_interval=10.0, silence_timeout=30.0, now=0.0), ScaledClock(100)),
    ],
    ids=["system-clock", "scaled-clock"],
)
@aio
async def test_a_client_that_goes_silent_behind_the_relay_is_dropped_on_both_sides(
    keepalive: Keepalive, clock: Clock
) -> None:
    results: list[RelayResult | Exception] = []
    async with (
        owner_server() as (owner, _),
        front(owner, results, keepalive=keepalive, clock=clock) as port,
        FaultProxy(port) as proxy,
        _client(proxy.port) as ws,
        Lateness() as late,
    ):
        await ws.send("hello")
        assert await ws.recv() == "owner:hello"
        started = time.monotonic()
        proxy.blackhole()  # the client's packets stop, and nothing tells the relay
        while not results:
            await asyncio.sleep(STEP)
        ended = time.monotonic()
        # down one silence timeout after the last pong, which came before the blackhole
        bound = clock.real_seconds(keepalive.silence_timeout)
        assert ended - started <= bound + late.allowance(started, ended, hops=4)
    assert isinstance(results[0], RelayResult) and results[0].closed_by == "drop"


@aio
async def test_the_owners_messages_are_bounded_at_max_size_and_not_past_it() -> None:
    results: list[RelayResult | Exception] = []
    limit = 1000
    async with owner_server() as (owner, _), front(owner, results, max_size=limit) as port:
        async with _client(port) as ws:
            at_the_bound = "x" * (limit - len("owner:"))
            await ws.send(at_the_bound)
            assert await ws.recv() == "owner:" + at_the_bound  # exactly the bound: carried
            await ws.send(at_the_bound + "x")  # the owner's answer is one byte over
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


@aio
async def test_an_ordinary_drop_leaves_no_task_exception_unretrieved() -> None:
    """A side that drops while the other is sending ends both copies with ConnectionClosed:
    each is retrieved and logged at DEBUG, never asyncio's "Task exception was never retrieved"
    at ERROR (which pages anyone alerting on ERROR)."""
    import gc
    import logging

    logged: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = logged.append  # type: ignore[method-assign]
    logging.getLogger("asyncio").addHandler(handler)
    try:
        results: list[RelayResult | Exception] = []
        async with owner_server() as (owner, _), front(owner, results) as port:
            for _ in range(20):
                async with _client(port) as ws:

                    async def flood(ws: ClientConnection = ws) -> None:
                        with contextlib.suppress(ConnectionClosed):
                            while True:
                                await ws.send(b"\0" * 652)

                    flooding = asyncio.create_task(flood())
                    await ws.send("crash")
                    await flooding
            await asyncio.sleep(0.1)
        assert len(results) == 20 and all(isinstance(r, RelayResult) for r in results)
        gc.collect()
        await asyncio.sleep(0)
    finally:
        logging.getLogger("asyncio").removeHandler(handler)
    assert [r.getMessage() for r in logged] == []
