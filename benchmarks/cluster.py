"""Past one process: what the Redis replay store costs per event, and what a relay adds per frame.

- **Store**: ``append`` of the same events (the size of an ``agent.thinking``) to the in-memory
  store and to the Redis store (one script call each, on a redis-server this benchmark starts on
  loopback), then one ``read_after`` of all of them; nanoseconds per event.
- **Relay**: one 652-byte audio frame at a time to an echo server and back, straight and through
  a :func:`voxwire.cluster.relay` front on loopback; the relay's added latency is the
  difference of the medians.

Without ``redis-server`` on the machine the store half is reported as skipped.
"""

from __future__ import annotations

import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from benchmarks.timing import run
from voxwire.cluster import (
    MemoryReplayStore,
    Owner,
    RedisReplayStore,
    ReplayStore,
    connect_redis,
    relay,
)

__all__ = ["Cluster", "cluster_table", "run_cluster_benchmark"]

EVENT = (
    b'{"type":"agent.thinking","seq":0,"ts":"2026-05-14T12:34:57.120Z",'
    b'"session_id":"s1","turn_id":"t1","delta":" close"}'
)
FRAME = bytes(652)


@dataclass(frozen=True)
class Cluster:
    """Medians of one run: the stores' cost per event, and the relay's per frame."""

    events: int
    memory_append_ns: float
    redis_append_ns: float | None
    memory_read_ns: float
    redis_read_ns: float | None
    frames: int
    direct_us: float
    relayed_us: float

    @property
    def relay_added_us(self) -> float:
        return self.relayed_us - self.direct_us


async def _store_round(store: ReplayStore, session: str, events: int) -> tuple[float, float]:
    started = time.perf_counter_ns()
    for seq in range(events):
        await store.append(session, seq, EVENT)
    appended = time.perf_counter_ns()
    replay = await store.read_after(session, -1)
    read = time.perf_counter_ns()
    assert replay is not None and len(replay.events) == events
    return (appended - started) / events, (read - appended) / events


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _relay_round(frames: int) -> tuple[float, float]:
    async def echo(ws: ServerConnection) -> None:
        async for message in ws:
            await ws.send(message)

    async with serve(echo, "127.0.0.1", 0, compression=None) as owner_server:
        owner = Owner("owner", "127.0.0.1", owner_server.sockets[0].getsockname()[1])

        async def front(ws: ServerConnection) -> None:
            await relay(ws, owner, "/")

        async with serve(front, "127.0.0.1", 0, compression=None) as front_server:
            front_port = front_server.sockets[0].getsockname()[1]
            timings = {}
            for name, port in (("direct", owner.port), ("relayed", front_port)):
                async with connect(f"ws://127.0.0.1:{port}/", compression=None) as ws:
                    samples = []
                    for _ in range(frames):
                        started = time.perf_counter_ns()
                        await ws.send(FRAME)
                        await ws.recv()
                        samples.append(time.perf_counter_ns() - started)
                    timings[name] = statistics.median(samples) / 1000
            return timings["direct"], timings["relayed"]


def run_cluster_benchmark(rounds: int, events: int = 2000, frames: int = 2000) -> Cluster:
    """``rounds`` interleaved rounds of each measurement; the medians."""
    memory_append, memory_read, redis_append, redis_read = [], [], [], []
    direct, relayed = [], []
    program = shutil.which("redis-server")
    with tempfile.TemporaryDirectory() as folder:
        server = None
        port = _free_port()
        if program:
            server = subprocess.Popen(
                [program, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                 "--appendonly", "no", "--dir", folder],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            _wait_for(port)
        try:
            for n in range(rounds):

                async def one(n: int = n) -> None:
                    m = await _store_round(MemoryReplayStore(), f"m{n}", events)
                    memory_append.append(m[0])
                    memory_read.append(m[1])
                    if server is not None:
                        client = connect_redis(f"redis://127.0.0.1:{port}/0")
                        try:
                            store = RedisReplayStore(client)
                            await store.open()
                            r = await _store_round(store, f"r{n}", events)
                        finally:
                            await client.aclose()
                        redis_append.append(r[0])
                        redis_read.append(r[1])
                    d, r2 = await _relay_round(frames // rounds or 1)
                    direct.append(d)
                    relayed.append(r2)

                run(one())
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=10)
    median = statistics.median
    return Cluster(
        events=events,
        memory_append_ns=median(memory_append),
        redis_append_ns=median(redis_append) if redis_append else None,
        memory_read_ns=median(memory_read),
        redis_read_ns=median(redis_read) if redis_read else None,
        frames=frames,
        direct_us=median(direct),
        relayed_us=median(relayed),
    )


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"redis-server did not listen on port {port}")


def cluster_table(c: Cluster) -> str:
    def ns(value: float | None) -> str:
        return "skipped (no redis-server)" if value is None else f"{value:,.0f} ns"

    ratio = (
        f"{c.redis_append_ns / c.memory_append_ns:,.0f}x" if c.redis_append_ns is not None else "-"
    )
    return "\n".join(
        [
            f"## Past one process ({c.events} events per store round, {c.frames} frames)",
            "",
            "| measurement | in memory | Redis | Redis vs memory |",
            "|---|---:|---:|---:|",
            f"| replay store append, per event | {ns(c.memory_append_ns)} | "
            f"{ns(c.redis_append_ns)} | {ratio} |",
            f"| replay store read (a full resume), per event | {ns(c.memory_read_ns)} | "
            f"{ns(c.redis_read_ns)} | |",
            "",
            "| 652-byte frame round trip | median |",
            "|---|---:|",
            f"| straight to the owner | {c.direct_us:,.0f} µs |",
            f"| through a relay | {c.relayed_us:,.0f} µs |",
            f"| added by the relay | {c.relay_added_us:,.0f} µs |",
            "",
        ]
    )
