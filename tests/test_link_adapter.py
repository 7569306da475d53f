"""The asyncio link adapter over real sockets on loopback: batches, faults, drain, keepalive."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from tests.timing import Lateness
from voxwire.clock import SYSTEM_CLOCK, SystemClock
from voxwire.link import DownCause, Keepalive, Link, LinkDown, Outbound, Overflow, Put
from voxwire.sansio import SendBinary, SendText
from voxwire.testing._faultproxy import FaultProxy

TIMEOUT = 20.0


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TIMEOUT):
            await main()

    asyncio.run(bounded())


def text(n: int, size: int = 0) -> SendText:
    return SendText(f'{{"n":{n},"pad":"{"x" * size}"}}'.encode())


@dataclass
class Peer:
    """A bare websockets server that keeps what it receives and how the connection closed."""

    received: list[str | bytes] = field(default_factory=list)
    close_code: int | None = None
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0

    async def handler(self, ws: ServerConnection) -> None:
        try:
            async for message in ws:
                self.received.append(message)
        except ConnectionClosed:
            pass
        self.close_code = ws.close_code
        self.closed.set()


@asynccontextmanager
async def peer_and_client(
    *, proxy: bool = False
) -> AsyncIterator[tuple[Peer, ClientConnection, FaultProxy | None]]:
    peer = Peer()
    async with serve(peer.handler, "127.0.0.1", 0, max_size=None, compression=None) as server:
        peer.port = server.sockets[0].getsockname()[1]
        fault = FaultProxy(peer.port) if proxy else None
        if fault is not None:
            await fault.start()
        url = fault.url if fault is not None else f"ws://127.0.0.1:{peer.port}"
        ws = await connect(url, ping_interval=None, max_size=None, compression=None)
        try:
            yield peer, ws, fault
        finally:
            ws.transport.abort()
            if fault is not None:
                await fault.close()


def downs() -> tuple[list[LinkDown], Callable[[LinkDown], None]]:
    seen: list[LinkDown] = []
    return seen, seen.append


# -- batches and order ----------------------------------------------------------------------------


def test_everything_queued_in_one_wakeup_goes_out_in_one_drain_in_order() -> None:
    async def main() -> None:
        async with peer_and_client() as (peer, ws, _):
            outbound = Outbound(event_bound=1024, overflow=Overflow.DROP)
            link = Link(ws, outbound, clock=SYSTEM_CLOCK, drain_timeout=2.0)
            for n in range(1000):
                assert link.event(text(n)) is Put.QUEUED
            link.control(SendBinary(b"\x01\x02"))
            link.close(1000, "done", final=[text(-1)])
            await link.wait_closed()
            await peer.closed.wait()
            assert peer.received == [
                b"\x01\x02",
                *(text(n).data.decode() for n in range(1000)),
                text(-1).data.decode(),
            ]
            assert peer.close_code == 1000
            assert link.drains == 1 and link.frames == 1002
            assert link.down is None and not link.up

    run(main)


def test_a_server_side_link_writes_its_batches_and_closes_with_its_code() -> None:
    async def handler(ws: ServerConnection) -> None:
        link = Link(ws, Outbound(event_bound=64, overflow=Overflow.WAIT), clock=SYSTEM_CLOCK,
                    drain_timeout=2.0)  # fmt: skip
        link.feed(text(n) for n in range(500))
        link.close(1001, "bye", final=[SendBinary(b"end")])
        await link.wait_closed()

    async def main() -> None:
        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            port = server.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{port}", compression=None) as ws:
                received = [message async for message in ws]
                assert received == [*(text(n).data.decode() for n in range(500)), b"end"]
                assert (ws.close_code, ws.close_reason) == (1001, "bye")

    run(main)


@pytest.mark.parametrize("burst", [256, 257, 10_000])
def test_a_burst_over_the_event_bound_is_written_up_to_it_and_the_rest_reported(burst: int) -> None:
    def lost(count: int) -> SendText:
        return SendText(b'{"lost":%d}' % count)

    async def main() -> None:
        async with peer_and_client() as (peer, ws, _):
            outbound = Outbound(event_bound=256, overflow=Overflow.DROP, report_lost=lost)
            link = Link(ws, outbound, clock=SYSTEM_CLOCK, drain_timeout=2.0)
            puts = [link.event(text(n)) for n in range(burst)]  # one burst: the writer sleeps
            assert puts.count(Put.QUEUED) == 256 and puts.count(Put.DROPPED) == burst - 256
            link.close(1000)
            await link.wait_closed()
            await peer.closed.wait()
            expected = [text(n).data.decode() for n in range(256)]
            if burst > 256:
                expected.append(f'{{"lost":{burst - 256}}}')
            assert peer.received == expected

    run(main)


def test_a_replay_of_4096_events_streams_through_a_bound_of_1024() -> None:
    async def main() -> None:
        async with peer_and_client() as (peer, ws, _):
            outbound = Outbound(event_bound=1024, overflow=Overflow.WAIT, control_first=False)
            link = Link(ws, outbound, clock=SYSTEM_CLOCK, drain_timeout=2.0)
            assert link.feed(text(n) for n in range(4096)) is Put.QUEUED
            assert outbound.waiting <= 1024
            assert await link.put_event(text(4096)) is Put.QUEUED  # waits behind the replay
            link.close(1000)
            await link.wait_closed()
            await peer.closed.wait()
            assert peer.received == [text(n).data.decode() for n in range(4097)]
            assert outbound.lost_total == 0 and link.down is None

    run(main)


def test_on_drained_tells_the_room_after_each_drain_that_made_some() -> None:
    async def main() -> None:
        async with peer_and_client() as (peer, ws, _):
            rooms: list[int] = []
            outbound = Outbound(event_bound=4, overflow=Overflow.WAIT)
            link = Link(
                ws, outbound, clock=SYSTEM_CLOCK, drain_timeout=2.0, on_drained=rooms.append
            )
            for n in range(3):
                link.event(text(n))
            while len(peer.received) < 3:
                await asyncio.sleep(0.01)
            assert rooms == [4]
            link.control(SendBinary(b"audio"))  # control made no room: nothing to tell
            while len(peer.received) < 4:
                await asyncio.sleep(0.01)
            assert rooms == [4]
            link.event(text(3))
            while len(peer.received) < 5:
                await asyncio.sleep(0.01)
            assert rooms == [4, 4]
            link.feed(text(n) for n in range(10))
            link.close(1000)
            await link.wait_closed()
            assert rooms == [4, 4]  # the feed holds the room at 0 until it is in; the close: none
            await peer.closed.wait()
            assert len(peer.received) == 15

    run(main)


def test_an_eager_link_writes_a_message_alone_in_its_turn_at_once_and_the_rest_at_its_end() -> None:
    async def main() -> None:
        async with peer_and_client() as (peer, ws, _):
            rooms: list[int] = []
            outbound = Outbound(event_bound=4, overflow=Overflow.WAIT, control_first=False)
            link = Link(
                ws, outbound, clock=SYSTEM_CLOCK, drain_timeout=2.0, on_drained=rooms.append,
                eager=True,
            )  # fmt: skip
            link.control(SendBinary(b"frame 0"))
            assert (link.drains, link.frames) == (1, 1)  # written before the turn ends
            for n in range(4):  # the same turn: they wait for its end, in order
                assert link.event(text(n)) is Put.QUEUED
            assert link.event(text(4)) is Put.FULL  # the bound holds what waits
            assert (link.drains, link.frames) == (1, 1) and rooms == []  # no report mid-turn
            await asyncio.sleep(0)  # the turn ends
            assert (link.drains, link.frames) == (2, 5) and rooms == [4]
            await asyncio.sleep(0)  # a new turn: the next message alone goes at once again
            link.control(SendBinary(b"frame 1"))
            assert (link.drains, link.frames) == (3, 6)
            await asyncio.sleep(0)
            assert rooms == [4]  # a control message alone made no room: nothing to report
            link.event(text(4))
            assert (link.drains, link.frames) == (4, 7)
            assert rooms == [4]
            await asyncio.sleep(0)
            assert rooms == [4, 4]  # the eager write's room, reported at its turn's end
            link.close(1000)
            await link.wait_closed()
            await peer.closed.wait()
            assert peer.received == [
                b"frame 0", *(text(n).data.decode() for n in range(4)), b"frame 1",
                text(4).data.decode(),
            ]  # fmt: skip

    run(main)


def test_an_eager_write_reports_no_room_while_its_caller_is_amid_queuing() -> None:
    async def main() -> None:
        async with peer_and_client() as (peer, ws, _):
            bound, total = 2, 10
            handed_out = unwritten = 0

            def pump() -> None:  # a core streaming on credit, as the gateway's does
                nonlocal handed_out, unwritten
                chunk = range(handed_out, min(handed_out + bound - unwritten, total))
                handed_out += len(chunk)
                unwritten += len(chunk)
                for n in chunk:  # a report of room in here would hand out more than fits
                    assert link.event(text(n)) is Put.QUEUED

            def drained(room: int) -> None:
                nonlocal unwritten
                unwritten = max(0, bound - room)
                pump()

            outbound = Outbound(event_bound=bound, overflow=Overflow.WAIT, control_first=False)
            link = Link(
                ws, outbound, clock=SYSTEM_CLOCK, drain_timeout=2.0, on_drained=drained,
                eager=True,
            )  # fmt: skip
            pump()
            while len(peer.received) < total:
                await asyncio.sleep(0.01)
            assert peer.received == [text(n).data.decode() for n in range(total)]
            link.close(1000)
            await link.wait_closed()

    run(main)


def test_flush_writes_what_is_queued_before_the_turn_ends_in_one_write() -> None:
    async def main() -> None:
        async with peer_and_client() as (peer, ws, _):
            link = Link(ws, Outbound(event_bound=8, overflow=Overflow.DROP), clock=SYSTEM_CLOCK,
                        drain_timeout=2.0)  # fmt: skip
            link.flush()  # nothing queued: nothing written
            assert link.drains == 0
            link.control(SendBinary(b"frame"))
            link.event(text(0))
            assert link.drains == 0  # not eager: it waits for the turn's end
            link.flush()  # the producer is done: out now, in one write
            assert (link.drains, link.frames) == (1, 2)
            await asyncio.sleep(0)  # the turn's end finds nothing left
            assert link.drains == 1
            link.close(1000)
            await link.wait_closed()
            await peer.closed.wait()
            assert peer.received == [b"frame", text(0).data.decode()]

    run(main)


def test_links_of_one_loop_share_the_turns_end_and_each_writes_its_own_batch() -> None:
    async def main() -> None:
        async with peer_and_client() as (peer, ws, _), peer_and_client() as (other, ws2, _):
            links = [
                Link(w, Outbound(event_bound=8, overflow=Overflow.DROP), clock=SYSTEM_CLOCK,
                     drain_timeout=2.0)
                for w in (ws, ws2)
            ]  # fmt: skip
            for n in range(3):
                for link in links:
                    link.event(text(n))
            assert [link.drains for link in links] == [0, 0]  # not eager: the turn's end
            await asyncio.sleep(0)
            assert [(link.drains, link.frames) for link in links] == [(1, 3), (1, 3)]
            for link in links:
                link.close(1000)
                await link.wait_closed()
            for p in (peer, other):
                await p.closed.wait()
                assert p.received == [text(n).data.decode() for n in range(3)]

    run(main)


def test_put_event_waits_for_room_and_wait_room_returns_once_there_is_some() -> None:
    async def main() -> None:
        async with peer_and_client() as (peer, ws, _):
            outbound = Outbound(event_bound=4, overflow=Overflow.WAIT)
            link = Link(ws, outbound, clock=SYSTEM_CLOCK, drain_timeout=2.0)
            for n in range(100):
                assert await link.put_event(text(n)) is Put.QUEUED
                assert outbound.waiting <= 4
            await link.wait_room()
            link.close(1000)
            await link.wait_closed()
            await peer.closed.wait()
            assert len(peer.received) == 100

    run(main)


# -- faults ---------------------------------------------------------------------------------------


def test_an_exception_in_the_writer_takes_the_link_down_and_calls_back() -> None:
    def broken_stamp(frame: SendText, now: float) -> SendText:
        raise RuntimeError("injected")

    async def main() -> None:
        async with peer_and_client() as (peer, ws, _):
            seen, on_down = downs()
            outbound = Outbound(event_bound=8, overflow=Overflow.DROP, stamp=broken_stamp)
            link = Link(ws, outbound, clock=SYSTEM_CLOCK, drain_timeout=2.0, on_down=on_down)
            link.control(text(1))
            await link.wait_closed()
            assert [d.cause for d in seen] == [DownCause.WRITER_FAILED]
            assert "injected" in seen[0].reason
            assert not link.up and link.down == seen[0]
            assert link.control(text(2)) is Put.CLOSED  # never silently "up"
            await peer.closed.wait()  # the peer sees the connection drop
            assert peer.received == [] and peer.close_code == 1006

    run(main)


class _Bounds(SystemClock):
    """Real time, noting when the link starts each wait it bounds (it asks ``real_seconds``)."""

    def __init__(self) -> None:
        self.started: list[float] = []

    def real_seconds(self, seconds: float) -> float:
        self.started.append(time.monotonic())
        return seconds


def test_a_peer_that_stops_reading_fails_the_drain_within_the_drain_timeout() -> None:
    drain = 0.5

    async def main() -> None:
        async with peer_and_client(proxy=True) as (peer, ws, proxy), Lateness() as late:
            assert proxy is not None
            seen, fell = [], []

            def on_down(down: LinkDown) -> None:
                seen.append(down.cause)
                fell.append(time.monotonic())

            clock = _Bounds()
            outbound = Outbound(event_bound=4096, overflow=Overflow.DROP)
            link = Link(ws, outbound, clock=clock, drain_timeout=drain, on_down=on_down)
            link.event(text(0))
            while len(peer.received) < 1:
                await asyncio.sleep(0.01)
            proxy.stall()
            for n in range(1, 1001):  # 64 MB: more than every buffer on the way holds
                link.event(text(n, size=64_000))
            await link.wait_closed()
            assert seen == [DownCause.DRAIN_TIMEOUT]
            started, [down] = clock.started[-1], fell  # the drain that never ended, and the end
            # the timer, then the writer task it cancels, which takes the link down
            assert drain <= down - started <= drain + late.allowance(started, down, hops=2)

    run(main)


def test_the_control_queue_past_its_bound_takes_the_link_down() -> None:
    async def main() -> None:
        async with peer_and_client(proxy=True) as (_peer, ws, proxy):
            assert proxy is not None
            seen, on_down = downs()
            outbound = Outbound(event_bound=8, overflow=Overflow.DROP, control_bound=8)
            link = Link(ws, outbound, clock=SYSTEM_CLOCK, drain_timeout=5.0, on_down=on_down)
            proxy.stall()
            link.control(text(0, size=8_000_000))  # the writer is stuck in this drain
            await asyncio.sleep(0.2)
            puts = [link.control(text(n)) for n in range(1, 10)]
            assert puts == [Put.QUEUED] * 8 + [Put.OVERFLOWED]
            await link.wait_closed()
            assert [d.cause for d in seen] == [DownCause.OVERFLOW]

    run(main)


def test_a_closed_connection_under_the_writer_takes_the_link_down() -> None:
    async def main() -> None:
        async with peer_and_client(proxy=True) as (_peer, ws, proxy):
            assert proxy is not None
            seen, on_down = downs()
            link = Link(
                ws,
                Outbound(event_bound=8, overflow=Overflow.DROP),
                clock=SYSTEM_CLOCK,
                drain_timeout=2.0,
                on_down=on_down,
            )
            proxy.reset()
            await asyncio.sleep(0.1)
            link.event(text(1))
            await link.wait_closed()
            assert [d.cause for d in seen] == [DownCause.CLOSED]

    run(main)


def test_a_link_runs_no_task_until_it_must_wait_for_the_socket() -> None:
    """Writes under the high-water mark and the keepalive need no task; the close does."""

    async def main() -> None:
        async with peer_and_client() as (peer, ws, _):
            keepalive = Keepalive(ping_interval=0.05, silence_timeout=5.0, now=SYSTEM_CLOCK.now())
            link = Link(ws, Outbound(event_bound=8, overflow=Overflow.DROP), clock=SYSTEM_CLOCK,
                        drain_timeout=2.0, keepalive=keepalive, name="lazy")  # fmt: skip
            for n in range(3):
                link.event(text(n))
                await asyncio.sleep(0.06)  # a ping each time
            await eventually_true(lambda: link.pongs >= 2)
            assert not [t for t in asyncio.all_tasks() if t.get_name() == "lazy writer"]
            assert len(peer.received) == 3 and link.up
            link.close(1000, "bye")
            await link.wait_closed()  # waits for a writer that did not exist when it was called
            await peer.closed.wait()
            assert peer.close_code == 1000 and not link.up and link.down is None

    run(main)


async def eventually_true(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(5.0):
        while not check():
            await asyncio.sleep(0.005)


@pytest.mark.parametrize("ending", ["stop", "down then stop", "close"])
def test_a_link_that_ended_is_freed_without_a_collection(ending: str) -> None:
    """Its cancelled tasks keep no cycle through the link (which holds the connection)."""

    async def main() -> None:
        async with peer_and_client() as (_peer, ws, _):
            link = Link(ws, Outbound(event_bound=8, overflow=Overflow.DROP), clock=SYSTEM_CLOCK,
                        drain_timeout=2.0, keepalive=Keepalive(ping_interval=5.0,
                        silence_timeout=10.0, now=SYSTEM_CLOCK.now()))  # fmt: skip
            link.event(text(1))
            await asyncio.sleep(0.01)
            if ending == "close":
                link.close(1000)
                await link.wait_closed()
            elif ending == "down then stop":
                link.abort("a test")
            await link.stop()
            await asyncio.sleep(0)  # the tasks' done callbacks
            gone = weakref.ref(link)
            del link
            assert gone() is None

    gc.collect()
    gc.disable()
    try:
        run(main)
    finally:
        gc.enable()


def test_a_write_after_the_peers_clean_close_is_no_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.close(1000, "done")

    async def main() -> None:
        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            port = server.sockets[0].getsockname()[1]
            ws = await connect(f"ws://127.0.0.1:{port}", compression=None)
            seen, on_down = downs()
            link = Link(ws, Outbound(event_bound=8, overflow=Overflow.DROP), clock=SYSTEM_CLOCK,
                        drain_timeout=2.0, on_down=on_down)  # fmt: skip
            await ws.wait_closed()
            link.event(text(1))
            await link.wait_closed()
            assert [d.cause for d in seen] == [DownCause.CLOSED]
            assert ws.close_code == 1000  # the closing handshake finished, not aborted

    with caplog.at_level(logging.INFO, "voxwire.link.adapter"):
        run(main)
    assert [r.levelno for r in caplog.records if r.name == "voxwire.link.adapter"] == [logging.INFO]


# -- keepalive ------------------------------------------------------------------------------------


def test_a_healthy_link_stays_up_on_pongs() -> None:
    async def main() -> None:
        async with peer_and_client() as (_peer, ws, _):
            seen, on_down = downs()
            keepalive = Keepalive(ping_interval=0.1, silence_timeout=0.3, now=SYSTEM_CLOCK.now())
            link = Link(
                ws,
                Outbound(event_bound=8, overflow=Overflow.DROP),
                clock=SYSTEM_CLOCK,
                drain_timeout=1.0,
                keepalive=keepalive,
                on_down=on_down,
            )
            await asyncio.sleep(1.0)
            assert seen == [] and link.up and link.pongs >= 5
            await link.stop()

    run(main)


@pytest.mark.parametrize("write_timeout", [0.2, 5.0])
def test_a_black_hole_is_noticed_one_silence_timeout_after_the_last_sign_of_life(
    write_timeout: float,
) -> None:
    async def main() -> None:
        async with peer_and_client(proxy=True) as (_peer, ws, proxy):
            assert proxy is not None
            seen, on_down = downs()
            at: list[float] = []

            def down_at(down: LinkDown) -> None:
                at.append(time.monotonic())
                on_down(down)

            keepalive = Keepalive(ping_interval=0.2, silence_timeout=0.6, now=SYSTEM_CLOCK.now())
            link = Link(
                ws,
                Outbound(event_bound=8, overflow=Overflow.DROP),
                clock=SYSTEM_CLOCK,
                drain_timeout=write_timeout,
                keepalive=keepalive,
                on_down=down_at,
            )
            await asyncio.sleep(0.5)
            assert link.pongs >= 1
            proxy.blackhole()
            link.event(text(1))  # a write into the hole changes nothing
            await link.wait_closed()
            assert [d.cause for d in seen] == [DownCause.SILENCE]
            late = at[0] - keepalive.last_heard
            assert 0.6 <= late < 0.6 + 0.5  # the old rule: two intervals plus the write timeout

    run(main)
