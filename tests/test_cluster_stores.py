"""The replay store and the owner directory, in memory and on a real redis-server.

Every scenario runs on both stores: the Redis one must answer exactly as the in-memory
reference does, bound by bound, and fail closed where Redis lost data or cannot be reached.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.peers.raw import aio
from tests.servers import RedisServer, free_port
from voxwire.clock import ScaledClock
from voxwire.cluster import (
    MemoryDirectory,
    MemoryReplayStore,
    Owner,
    RedisDirectory,
    RedisReplayStore,
    ReplayBounds,
    ReplayStore,
    StoreUnavailable,
    connect_redis,
)
from voxwire.cluster.directory import RENEW_BATCH
from voxwire.ovp import REPLAY_BUFFER_MAX_EVENTS

redis_asyncio = pytest.importorskip("redis.asyncio", reason="the redis extra is not installed")


DEFAULT_BOUNDS = ReplayBounds()


class ManualClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds

    def real_seconds(self, seconds: float) -> float:
        return seconds


@contextlib.asynccontextmanager
async def _client(server: RedisServer) -> AsyncIterator[redis_asyncio.Redis]:
    client = redis_asyncio.Redis.from_url(
        server.url, socket_timeout=1.0, socket_connect_timeout=1.0
    )
    try:
        yield client
    finally:
        await client.aclose()


StoreFactory = Callable[..., contextlib.AbstractAsyncContextManager[ReplayStore]]


@pytest.fixture(params=["memory", "redis"])
def make_store(request: pytest.FixtureRequest, redis_server: RedisServer) -> StoreFactory:
    """Opens a store of the kind under test, empty, inside the test's event loop."""

    @contextlib.asynccontextmanager
    async def make(
        bounds: ReplayBounds = DEFAULT_BOUNDS, clock: ManualClock | None = None
    ) -> AsyncIterator[ReplayStore]:
        clock = clock or ManualClock()
        if request.param == "memory":
            yield MemoryReplayStore(bounds, clock)
            return
        async with _client(redis_server) as client:
            await client.flushdb()
            store = RedisReplayStore(client, bounds=bounds, clock=clock)
            await store.open()
            yield store

    return make


def _event(seq: int, size: int = 16) -> bytes:
    return f'{{"seq":{seq}}}'.encode().ljust(size, b" ")


@aio
async def test_a_resume_gets_every_event_after_its_seq(make_store: StoreFactory) -> None:
    async with make_store() as store:
        for seq in range(10):
            await store.append("s1", seq, _event(seq))
        replay = await store.read_after("s1", 4)
        assert replay is not None and replay.last_seq == 9
        assert replay.events == [_event(s) for s in range(5, 10)]
        assert (await store.read_after("s1", 9)).events == []  # type: ignore[union-attr]
        assert (await store.read_after("s1", -1)).events == [_event(s) for s in range(10)]  # type: ignore[union-attr]
        assert await store.read_after("s1", 10) is None  # ahead of anything stored
        assert await store.read_after("nobody", -1) is None


@aio
async def test_the_count_bound_at_n_and_n_plus_1(make_store: StoreFactory) -> None:
    async with make_store() as store:
        n = REPLAY_BUFFER_MAX_EVENTS
        for seq in range(n):
            await store.append("s1", seq, _event(seq))
        full = await store.read_after("s1", -1)
        assert full is not None and len(full.events) == n  # exactly the bound: all held
        await store.append("s1", n, _event(n))
        assert await store.read_after("s1", -1) is None  # seq 0 is gone: refused, not partial
        rest = await store.read_after("s1", 0)
        assert rest is not None and len(rest.events) == n and rest.events[0] == _event(1)


@aio
async def test_the_byte_bound_at_the_limit_and_over(make_store: StoreFactory) -> None:
    async with make_store(ReplayBounds(max_bytes=10_000)) as store:
        for seq in range(10):
            await store.append("s1", seq, _event(seq, 1000))
        assert len((await store.read_after("s1", -1)).events) == 10  # type: ignore[union-attr]
        await store.append("s1", 10, _event(10, 1001))
        assert await store.read_after("s1", 0) is None  # 10,001 bytes: seq 0 and 1 trimmed
        assert len((await store.read_after("s1", 1)).events) == 9  # type: ignore[union-attr]
        # One event larger than the bound is not held at all, and says so.
        await store.append("s1", 11, _event(11, 10_001))
        assert await store.read_after("s1", 10) is None


@aio
async def test_the_age_bound_at_the_limit_and_over(make_store: StoreFactory) -> None:
    clock = ManualClock()
    async with make_store(ReplayBounds(max_age_ms=60_000), clock) as store:
        await store.append("s1", 0, _event(0))
        clock.t += 60.0
        assert (await store.read_after("s1", -1)).events == [_event(0)]  # type: ignore[union-attr]
        clock.t += 0.002
        assert await store.read_after("s1", -1) is None


@aio
async def test_a_history_is_forgotten_after_its_ttl(make_store: StoreFactory) -> None:
    clock = ManualClock()
    async with make_store(ReplayBounds(ttl_ms=30_000, max_age_ms=120_000), clock) as store:
        await store.append("s1", 0, _event(0))
        await store.forget("s2")
        clock.t += 29.0
        assert await store.read_after("s1", -1) is not None
        await store.forget("s1")
        assert await store.read_after("s1", -1) is None


@aio
async def test_a_history_that_starts_late_holds_nothing_before_it(make_store: StoreFactory) -> None:
    async with make_store() as store:
        await store.append("s1", 7, _event(7))
        assert await store.read_after("s1", 5) is None
        assert (await store.read_after("s1", 6)).events == [_event(7)]  # type: ignore[union-attr]


@aio
async def test_a_seq_that_does_not_increase_is_refused(make_store: StoreFactory) -> None:
    async with make_store() as store:
        await store.append("s1", 3, _event(3))
        with pytest.raises(ValueError, match="seq 3 is not after 3"):
            await store.append("s1", 3, _event(3))


@aio
async def test_events_extended_in_one_call_are_held_as_appended_one_by_one(
    make_store: StoreFactory,
) -> None:
    async with make_store(ReplayBounds(max_events=5)) as store:
        await store.extend("s1", [])  # nothing to store: no call at all
        await store.extend("s1", [(seq, _event(seq)) for seq in range(4)])
        await store.extend("s1", [(seq, _event(seq)) for seq in range(4, 7)])
        assert await store.read_after("s1", 0) is None  # seq 0 and 1 trimmed to the bound
        assert (await store.read_after("s1", 1)).events == [_event(s) for s in range(2, 7)]  # type: ignore[union-attr]
        with pytest.raises(ValueError, match="seq 6 is not after 6"):
            await store.extend("s1", [(6, _event(6))])
        assert (await store.read_after("s1", 5)).last_seq == 6  # type: ignore[union-attr]


@aio
async def test_a_resume_state_lives_beside_its_events(make_store: StoreFactory) -> None:
    clock = ManualClock()
    async with make_store(ReplayBounds(ttl_ms=30_000), clock) as store:
        assert await store.load_state("s1") is None
        await store.save_state("s1", b"before any event")  # a Brisvox call keeps no events
        assert await store.load_state("s1") == b"before any event"
        await store.extend("s1", [(0, _event(0))], state=b"\x00state 2")  # one call
        assert await store.load_state("s1") == b"\x00state 2"
        assert (await store.read_after("s1", -1)).events == [_event(0)]  # type: ignore[union-attr]
        clock.t += 29.0
        assert await store.load_state("s1") == b"\x00state 2"
        await store.forget("s1")
        assert await store.load_state("s1") is None


@aio
async def test_after_a_redis_restart_no_state_from_before_is_served(
    redis_server: RedisServer,
) -> None:
    client = connect_redis(redis_server.url)
    try:
        await client.flushdb()
        store = RedisReplayStore(client)
        await store.save_state("s1", b"state")
        redis_server.restart()
        assert await store.load_state("s1") is None
        await store.save_state("s1", b"again")  # a new epoch
        assert await store.load_state("s1") == b"again"
    finally:
        await client.aclose()


@aio
async def test_the_redis_ttl_is_set(redis_server: RedisServer) -> None:
    async with _client(redis_server) as client:
        await client.flushdb()
        store = RedisReplayStore(client, bounds=ReplayBounds(ttl_ms=5_000))
        await store.save_state("s2", b"state")  # a state alone expires as a history does
        assert 0 < await client.pttl("voxwire:ovp:replay-meta:s2") <= 5_000
        await store.open()
        await store.append("s1", 0, _event(0))
        assert 0 < await client.pttl("voxwire:ovp:replay:s1") <= 5_000
        assert 0 < await client.pttl("voxwire:ovp:replay-meta:s1") <= 5_000


@aio
async def test_after_a_redis_restart_no_history_from_before_is_served(
    redis_server: RedisServer,
) -> None:
    client = connect_redis(redis_server.url)
    try:
        await client.flushdb()
        store = RedisReplayStore(client)
        before = await store.open()
        for seq in range(6):
            await store.append("s1", seq, _event(seq))
        redis_server.restart()
        assert await store.read_after("s1", 2) is None
        await store.append("s1", 6, _event(6))  # a new epoch, and a history starting at 6
        assert store.epoch != before
        assert await store.read_after("s1", 2) is None
        assert (await store.read_after("s1", 5)).events == [_event(6)]  # type: ignore[union-attr]
    finally:
        await client.aclose()


@aio
async def test_an_unreachable_redis_is_store_unavailable_fast(tmp_path: Path) -> None:
    client = connect_redis(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5)
    store = RedisReplayStore(client)
    try:
        async with asyncio.timeout(5):
            with pytest.raises(StoreUnavailable, match="cannot be reached"):
                await store.append("s1", 0, _event(0))
            with pytest.raises(StoreUnavailable):
                await store.read_after("s1", -1)
    finally:
        await client.aclose()


@aio
async def test_the_directory_finds_a_live_owner_and_not_a_dead_one(
    redis_server: RedisServer,
) -> None:
    a_client = connect_redis(redis_server.url)
    b_client = connect_redis(redis_server.url)
    a = RedisDirectory(a_client, Owner("a", "127.0.0.1", 9001), heartbeat=0.05, expiry=0.3)
    b = RedisDirectory(b_client, Owner("b", "127.0.0.1", 9002), heartbeat=0.05, expiry=0.3)
    try:
        await a.start()
        await b.start()
        await a.claim("ovp", "s1", ttl=30)
        assert await b.lookup("ovp", "s1") == Owner("a", "127.0.0.1", 9001)
        assert await b.lookup("brisvox", "s1") is None
        await asyncio.sleep(0.5)  # heartbeats keep a alive past its expiry
        assert await b.lookup("ovp", "s1") == a.me
        await b.release("ovp", "s1")  # not b's: nothing happens
        assert await b.lookup("ovp", "s1") == a.me
        await a.close()  # a stops: its sessions have no owner now
        assert await b.lookup("ovp", "s1") is None
    finally:
        await a.close()
        await b.close()
        await a_client.aclose()
        await b_client.aclose()


@aio
async def test_an_owner_whose_heartbeat_stops_is_no_owner(redis_server: RedisServer) -> None:
    client = connect_redis(redis_server.url)
    a = RedisDirectory(client, Owner("a", "127.0.0.1", 9001), heartbeat=0.05, expiry=0.2)
    try:
        await a.start()
        await a.claim("brisvox", "call-1", ttl=30)
        assert a._task is not None
        a._task.cancel()  # the process hangs or dies: no more heartbeats, entry left behind
        await asyncio.sleep(0.3)
        assert await a.lookup("brisvox", "call-1") is None
    finally:
        await a.close()
        await client.aclose()


@aio
async def test_the_heartbeat_and_the_expiry_run_on_the_directorys_clock(
    redis_server: RedisServer,
) -> None:
    client = connect_redis(redis_server.url)
    clock = ScaledClock(20)  # the default 1 s heartbeat and 3 s expiry: 50 and 150 ms real
    a = RedisDirectory(client, Owner("a", "127.0.0.1", 9001), clock=clock)
    try:
        await a.start()
        await a.claim("ovp", "s1", ttl=30)
        await clock.sleep(10.0)  # heartbeats keep a alive past three expiries
        assert await a.lookup("ovp", "s1") == a.me
        assert a._task is not None
        a._task.cancel()  # no more heartbeats
        await clock.sleep(4.0)  # past the expiry
        assert await a.lookup("ovp", "s1") is None
    finally:
        await a.close()
        await client.aclose()


@aio
async def test_the_memory_directory_knows_only_itself() -> None:
    me = Owner("solo", "127.0.0.1", 1)
    directory = MemoryDirectory(me)
    assert await directory.lookup("ovp", "s1") is None
    assert await directory.claim("ovp", "s1", ttl=1) == 1
    assert await directory.lookup("ovp", "s1") == me
    assert await directory.claim("ovp", "s1") == 2  # every claim is fenced one higher
    await directory.release("ovp", "s1")
    assert await directory.lookup("ovp", "s1") is None


@contextlib.asynccontextmanager
async def _directory(
    server: RedisServer, process: str, clock: ScaledClock
) -> AsyncIterator[RedisDirectory]:
    """A started directory of ``process`` on its own client: closed, and the client with it."""
    client = connect_redis(server.url)
    directory = RedisDirectory(client, Owner(process, "127.0.0.1", 9001), clock=clock)
    try:
        await directory.start()
        yield directory
    finally:
        await directory.close()
        await client.aclose()


def _stop_heartbeat(directory: RedisDirectory) -> None:
    """The process hangs or dies: nothing renews its entries from now on."""
    assert directory._task is not None
    directory._task.cancel()


@aio
async def test_owners_return_within_one_heartbeat_after_redis_loses_its_data(
    redis_server: RedisServer,
) -> None:
    clock = ScaledClock(20)  # heartbeat 1 s = 50 ms real, expiry 3 s = 150 ms
    async with _client(redis_server) as client, _directory(redis_server, "a", clock) as a:
        await a.claim("ovp", "s1")
        await a.claim("brisvox", "call-1", ttl=60)
        await client.flushall()  # a restart, a failover or an eviction: every key is gone
        assert await a.lookup("ovp", "s1") is None
        await clock.sleep(1.5)  # one heartbeat (and a half, for a loaded machine)
        assert await a.lookup("ovp", "s1") == a.me
        assert await a.lookup("brisvox", "call-1") == a.me


@aio
async def test_a_dead_process_entries_expire_within_the_expiry_not_a_day(
    redis_server: RedisServer,
) -> None:
    clock = ScaledClock(20)
    async with _client(redis_server) as client, _directory(redis_server, "a", clock) as a:
        await a.claim("ovp", "s1")
        key = "voxwire:owner:ovp:s1"
        assert 0 < await client.pttl(key) <= clock.real_seconds(3.0) * 1000
        _stop_heartbeat(a)
        await clock.sleep(4.0)
        assert await client.exists(key) == 0  # restarted under the same id, it attracts nothing


@aio
async def test_a_takeover_fences_the_stale_owner(redis_server: RedisServer) -> None:
    clock = ScaledClock(20)
    async with _directory(redis_server, "a", clock) as a, _directory(redis_server, "b", clock) as b:
        first = await a.claim("ovp", "s1")
        second = await b.claim("ovp", "s1")  # b takes the session over
        assert second == first + 1 and await a.lookup("ovp", "s1") == b.me
        await clock.sleep(1.5)  # a's renewal finds b's claim and gives the session up
        assert not a.holds("ovp", "s1") and b.holds("ovp", "s1")
        assert await a.lookup("ovp", "s1") == b.me  # a never wrote over b's entry
        await a.release("ovp", "s1")  # a stale release deletes nothing
        assert await b.lookup("ovp", "s1") == b.me


@aio
async def test_a_claim_with_a_ttl_stops_being_renewed_when_it_passes(
    redis_server: RedisServer,
) -> None:
    clock = ScaledClock(20)
    async with _directory(redis_server, "a", clock) as a:
        await a.claim("brisvox", "call-1", ttl=2.0)  # a parked call's resume window
        assert a.holds("brisvox", "call-1")
        await clock.sleep(2.5)
        assert not a.holds("brisvox", "call-1")
        await clock.sleep(4.0)  # past the last renewal's expiry
        assert await a.lookup("brisvox", "call-1") is None


@pytest.mark.parametrize("leases", [RENEW_BATCH, RENEW_BATCH + 1, 3 * RENEW_BATCH])
@aio
async def test_every_lease_is_renewed_in_batches_of_at_most_the_bound(
    redis_server: RedisServer, leases: int
) -> None:
    clock = ScaledClock(20)
    async with _client(redis_server) as client, _directory(redis_server, "a", clock) as a:
        batches: list[int] = []
        renew = a._renew

        async def counted(*, keys: list[str], args: list[object]) -> Any:
            batches.append(len(keys))
            return await renew(keys=keys, args=args)

        a._renew = counted  # type: ignore[assignment]
        for n in range(leases):
            await a.claim("ovp", f"s{n}")
        await client.flushall()
        await clock.sleep(1.5)  # one heartbeat writes every lease back, batch by batch
        keys = [f"voxwire:owner:ovp:s{n}" for n in range(leases)]
        assert await client.exists(*keys) == leases
        assert max(batches) == RENEW_BATCH  # never more in one call
        assert batches[-1] == (leases % RENEW_BATCH or RENEW_BATCH)  # the rest, last


@aio
async def test_a_session_started_anywhere_is_seen_by_every_watching_process_within_a_heartbeat(
    redis_server: RedisServer,
) -> None:
    redis_server.flush()
    clock = ScaledClock(20)  # heartbeat 1 s = 50 ms real
    async with _directory(redis_server, "a", clock) as a, _directory(redis_server, "b", clock) as b:
        b.watch("ovp")
        assert not b.seen("ovp", "s1")
        await a.claim("ovp", "s1")
        await a.claim("brisvox", "call-1")
        assert not b.seen("ovp", "s1")  # nothing is asked of Redis: it waits for a heartbeat
        assert a.seen("ovp", "s1")  # its own claims, at once
        await clock.sleep(1.5)  # one heartbeat (and a half, for a loaded machine)
        assert b.seen("ovp", "s1")
        assert not b.seen("brisvox", "call-1")  # a protocol not watched is not read
        await a.release("ovp", "s1")
        await a.claim("ovp", "s1")  # a takeover's claim: the session did not start again
        assert await redis_server_started(redis_server, "ovp") == ["s1"]


async def redis_server_started(server: RedisServer, protocol: str) -> list[str]:
    """The sessions Redis lists as started for ``protocol``."""
    async with _client(server) as client:
        members = await client.zrange(f"voxwire:started:{protocol}", 0, -1)
    return [member.decode() for member in members]


@aio
async def test_the_memory_directory_has_seen_what_it_claimed() -> None:
    directory = MemoryDirectory(Owner("solo", "127.0.0.1", 1))
    directory.watch("ovp")
    assert not directory.seen("ovp", "s1")
    await directory.claim("ovp", "s1")
    await directory.release("ovp", "s1")
    assert directory.seen("ovp", "s1")
