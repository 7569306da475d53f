"""Load on loopback: 100 concurrent calls, 50 frames a second both ways plus events.

The gateway runs in a child process (``python -m tests.test_ovp_load``), so the two sides have
a core each, as they would in production. Every call streams ``SECONDS`` of audio at its real
pace and sends events; the gateway echoes every frame and adds a transcript every 10 frames.
The test checks that every frame arrived in order both ways and every event exactly once, and
reports the pace achieved and the echo latency. Its bounds allow the time either process waited
for a CPU (a loaded machine), as the child reports it when done. Bounded: the child serves
``CALLS`` sessions and exits, and stops by itself after ``CHILD_LIFETIME_S`` in any case.
"""

from __future__ import annotations

import asyncio
import statistics
import struct
import subprocess
import sys
import time

from tests.conftest import ROOT
from tests.test_ovp_support import AGENT, CALL, SECRET, ovp_client, run, token
from tests.timing import waited
from voxwire import ovp
from voxwire.ovp.gateway import Gateway, GatewaySession

CALLS = 100
SECONDS = 3.0
FRAMES = int(SECONDS * 1000 / ovp.FRAME_MS)  # 150 a call each way
EVENT_EVERY = 25  # client frames between two agent.input
TRANSCRIPT_EVERY = 10  # echoed frames between two transcript.partial
CHILD_LIFETIME_S = 60.0
STAMP = struct.Struct("<d")


async def echo(session: GatewaySession) -> None:
    """Echo every frame, a transcript every 10; end the call, or fail it if anything was off."""
    session.start(CALL, AGENT)
    frames: list[int] = []
    events: list[int] = []
    async for item in session:
        if isinstance(item, ovp.AudioFrame):
            frames.append(item.frame_seq)
            session.send_audio(item.pcm)
            if len(frames) % TRANSCRIPT_EVERY == 0:
                session.send_transcript_partial(
                    utterance_id="u", speaker="caller", text=f"{len(frames)}"
                )
            if len(frames) == FRAMES:
                break
        else:
            events.append(item.seq)
    expected_events = list(range(FRAMES // EVENT_EVERY))
    if frames != list(range(FRAMES)) or events != expected_events:
        session.fail(ovp.ErrorCode.OVP_INTERNAL_ERROR, f"frames {frames[:5]}..., events {events}")
    else:
        session.end()


async def serve_calls() -> None:
    """The child: print the port, serve CALLS sessions, print how long it waited for a CPU."""
    ended = 0
    done = asyncio.Event()

    async def handler(session: GatewaySession) -> None:
        nonlocal ended
        await echo(session)
        ended += 1
        if ended == CALLS:
            done.set()

    async with Gateway(handler, secret=SECRET) as gateway:
        print(gateway.port, flush=True)
        ready = waited()
        async with asyncio.timeout(CHILD_LIFETIME_S):
            await done.wait()
        print(waited() - ready, flush=True)
        await asyncio.sleep(0.5)  # let the last closing handshakes finish


async def call(url: str, index: int, latencies: list[float]) -> float:
    """One call; returns how late its last frame left, in seconds."""
    session_id = f"ovps_load_{index}"
    client = ovp_client(url, tok=token(session_id), session_id=session_id)
    await client.connect()
    received: list[int] = []
    lateness = 0.0

    async def listen() -> None:
        async for frame in client.audio():
            received.append(frame.frame_seq)
            (sent_at,) = STAMP.unpack_from(frame.pcm)
            latencies.append(time.perf_counter() - sent_at)

    async def talk() -> None:
        nonlocal lateness
        began = time.perf_counter()
        for n in range(FRAMES):  # frame n leaves at n x 20 ms, or at once when late
            due = began + n * ovp.FRAME_MS / 1000
            await asyncio.sleep(due - time.perf_counter())
            lateness = time.perf_counter() - due
            pcm = STAMP.pack(time.perf_counter()).ljust(ovp.PCM_BYTES_PER_FRAME, b"\0")
            client.send_audio(pcm)
            if n % EVENT_EVERY == 0:
                await client.send_agent_input(source="system", text=f"frame {n}")

    listener = asyncio.create_task(listen())
    talker = asyncio.create_task(talk())
    events = [message async for message in client]
    seqs = [message.seq for message in events]
    await talker
    await listener
    end = client.session_end
    assert end is not None and end.reason == "agent_ended", f"call {index}: {client.over}"
    assert received == list(range(FRAMES)), f"call {index}: echoed frames lost or out of order"
    assert seqs == list(range(len(seqs))), f"call {index}: events {seqs}"
    ours = [m for m in events if m.type not in ("call.quality.update", "agent.cost.tick")]
    assert len(ours) == 2 + FRAMES // TRANSCRIPT_EVERY, f"call {index}: events {seqs}"
    await client.close()
    return lateness


def test_a_hundred_concurrent_calls_deliver_every_frame_in_order() -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.test_ovp_load"], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        latencies: list[float] = []

        async def main() -> tuple[float, list[float]]:
            began = time.perf_counter()
            late = await asyncio.gather(
                *(call(f"ws://127.0.0.1:{port}", i, latencies) for i in range(CALLS))
            )
            return time.perf_counter() - began, late

        ready = waited()
        elapsed, late = run(main(), timeout=CHILD_LIFETIME_S)
        allowed = waited() - ready + float(child.stdout.readline())
        assert child.wait(timeout=10) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert len(latencies) == CALLS * FRAMES
    latencies.sort()
    p50, p99 = statistics.median(latencies), latencies[int(len(latencies) * 0.99)]
    print(
        f"\n{CALLS} calls x {FRAMES} frames each way ({SECONDS:g} s of audio) in {elapsed:.2f} s; "
        f"last frame late by {statistics.median(late) * 1000:.0f} ms (median call), "
        f"{max(late) * 1000:.0f} ms (worst); "
        f"echo latency p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; "
        f"both processes waited {allowed:.2f} s for a CPU"
    )
    assert p99 < 2.0 + allowed and elapsed < 3 * SECONDS + allowed


if __name__ == "__main__":
    asyncio.run(serve_calls())
