"""How many real-time OVP calls one gateway process sustains, against a bare websockets echo.

Each server runs in a child process (a core of its own); this process generates the load with
the same lightweight client for both: every call sends a 652-byte frame every 20 ms (a send
time in its payload) and an ``agent.input`` every 25 frames, and measures how long each frame
takes to come back. The voxwire gateway decodes and checks every frame and event, echoes the
audio through its application interface and adds a ``transcript.partial`` every 10 frames; the
bare server echoes bytes. A level of concurrent calls is sustained when no frame is lost and the
p99 echo latency stays under 20 ms; the levels rise until one is not. The generator paces each
call with its own task and sleeps, or (``--pacer shared``) every call from one
:class:`~benchmarks.pacer.Pacer` task whose senders write through a :class:`~voxwire.link.Link`,
so it spends less of the machine the servers share.

A level is N calls at once: every call connects first (an OVP call once its ``session.start``
arrived), and only then does the audio start, call ``i`` ``i / N`` of 0.5 s (25 frames) after
the first, so that the calls' frames, their ``agent.input`` and the gateway's
``transcript.partial`` fall at independent moments, as independent calls' do, not all in one
20 ms period. Every call streams until the level's end, and the p50 and p99 are of the frames
sent while all N stream (the level's seconds), for both servers alike. What the connection
storm costs is reported beside it (``setup_ms``: from the first connect to the last call
ready), not mixed into the frames' latency.

Loopback only, and bounded: every level runs ``seconds`` of audio, and each child stops by
itself after ``CHILD_LIFETIME_S``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import struct
import subprocess
import sys
import time
from dataclasses import dataclass

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from benchmarks.pacer import Pacer
from benchmarks.timing import run
from voxwire import ovp
from voxwire.clock import SYSTEM_CLOCK
from voxwire.link import Link, Outbound, Overflow
from voxwire.ovp._upgrade import OfferingConnection  # offers orbit-voice/1.0 verbatim
from voxwire.ovp.gateway import Gateway, GatewaySession, mint_token
from voxwire.sansio import SendBinary, SendText

__all__ = ["Level", "run_transport_benchmarks", "sustained"]

SECRET = "benchmark-secret-that-is-long-enough-for-hs256"
TENANT = "tenant_bench"
CHILD_LIFETIME_S = 600.0
LATENCY_BOUND_S = 0.020
FRAME_S = ovp.FRAME_MS / 1000
EVENT_EVERY = 25
SPREAD_S = EVENT_EVERY * FRAME_S
"""The calls of a level start their audio spread evenly over this."""
TRANSCRIPT_EVERY = 10
STAMP = struct.Struct("<d")
HEADER = struct.Struct("<BBHII")
CALL = ovp.CallInfo(
    call_id="call_bench", from_="+14155551234", to="+18005550100",
    direction=ovp.CallDirection.INBOUND, secure=True,
)  # fmt: skip
AGENT = ovp.AgentConfig(
    agent_id="agt_bench", name="Bench", instructions="Echo.", model="m", voice_id="v",
    language="en-US", tools=[],
)  # fmt: skip


@dataclass(frozen=True)
class Level:
    """One level of load: ``calls`` concurrent calls for the run's seconds of audio."""

    server: str
    calls: int
    frames_expected: int
    frames_back: int
    p50_ms: float
    p99_ms: float
    setup_ms: float
    """From the first connect to the last call ready (OVP: its ``session.start`` received)."""

    @property
    def sustained(self) -> bool:
        return self.frames_back == self.frames_expected and self.p99_ms < LATENCY_BOUND_S * 1000


# -- the servers (child processes) -------------------------------------------------------------


async def _echo_session(session: GatewaySession) -> None:
    session.start(CALL, AGENT)
    frames = 0
    async for item in session:
        if isinstance(item, ovp.AudioFrame):
            session.send_audio(item.pcm)
            frames += 1
            if frames % TRANSCRIPT_EVERY == 0:
                session.send_transcript_partial(
                    utterance_id="u", speaker=ovp.Speaker.CALLER, text="..."
                )


async def _serve_ovp() -> None:
    async with Gateway(_echo_session, secret=SECRET) as gateway:
        print(gateway.port, flush=True)
        await asyncio.sleep(CHILD_LIFETIME_S)


async def _serve_echo() -> None:
    async def echo(ws: ServerConnection) -> None:
        try:
            async for message in ws:
                await ws.send(message)
        except ConnectionClosed:  # a call that hung up while its last frame came back
            pass

    async with serve(echo, "127.0.0.1", 0, compression=None, max_size=2**16) as server:
        print(next(iter(server.sockets)).getsockname()[1], flush=True)
        await asyncio.sleep(CHILD_LIFETIME_S)


# -- the load ----------------------------------------------------------------------------------


async def _connect(base: str, server: str, index: int) -> tuple[ClientConnection, str]:
    """One call's connection, ready for audio (OVP: its session.start received); its session."""
    session_id = f"ovps_bench_{index}_{time.monotonic_ns()}"  # an ended session's id stays taken
    if server == "ovp":
        token = mint_token(SECRET, session_id=session_id, tenant_id=TENANT)
        url = f"{base}/voice/ws/{session_id}?token={token}"
        ws: ClientConnection = await connect(
            url, create_connection=OfferingConnection, compression=None
        )
        start = json.loads(await ws.recv())
        assert start["type"] == "session.start", start
    else:
        ws = await connect(base, compression=None)
    return ws, session_id


async def _call(
    ws: ClientConnection,
    session_id: str,
    began: float,
    frames: int,
    steady: float,
    latencies: list[float],
    pacer: Pacer | None,
) -> int:
    """One call: stream ``frames`` frames in real time from ``began`` (``perf_counter``
    seconds; on its own sleeps, or from the shared ``pacer`` through a
    :class:`~voxwire.link.Link`), keeping the latency of those sent from ``steady`` on; return
    how many came back."""
    back = 0

    async def listen() -> None:
        nonlocal back
        async for message in ws:
            if isinstance(message, bytes):
                (sent,) = STAMP.unpack_from(message, HEADER.size)
                if sent >= steady:
                    latencies.append(time.perf_counter() - sent)
                back += 1
                if back == frames:
                    return

    listener = asyncio.create_task(listen())

    def frame(n: int) -> tuple[bytes, str | None]:
        """Frame ``n`` stamped with its send time, and the agent.input that goes with it."""
        header = HEADER.pack(1, 0, 0, n, n * 320)
        audio = header + STAMP.pack(time.perf_counter()).ljust(ovp.PCM_BYTES_PER_FRAME, b"\0")
        if n % EVENT_EVERY:
            return audio, None
        event = {
            **{"type": "agent.input", "seq": n // EVENT_EVERY + 1, "ts": "2026-05-14T12:34:56Z"},
            **{"session_id": session_id, "source": "system", "text": f"frame {n}"},
        }
        return audio, json.dumps(event)

    link: Link | None = None
    if pacer is None:  # a task per call, sleeping until each frame is due
        for n in range(frames):
            await asyncio.sleep(began + n * FRAME_S - time.perf_counter())
            audio, text = frame(n)
            await ws.send(audio)
            if text is not None:
                await ws.send(text)
    else:  # one pacer calls every call's sender at each tick; each writes through a Link
        link = Link(
            ws, Outbound(event_bound=1024, overflow=Overflow.WAIT), clock=SYSTEM_CLOCK,
            drain_timeout=2.0,
        )  # fmt: skip
        sent = 0
        await asyncio.sleep(began - time.perf_counter())

        def send(due: int) -> bool:
            nonlocal sent
            for _ in range(min(due, frames - sent)):
                audio, text = frame(sent)
                link.event(SendBinary(audio))
                if text is not None:
                    link.event(SendText(text.encode()))
                sent += 1
            return sent < frames

        pacer.add(send)
        while send in pacer:
            await asyncio.sleep(FRAME_S)
    try:
        async with asyncio.timeout(2.0):
            await listener
    except TimeoutError:
        listener.cancel()
    if link is not None:
        await link.stop()
    await ws.close()
    return back


async def _level(base: str, server: str, calls: int, seconds: float, shared_pacer: bool) -> Level:
    frames, spread = int(seconds / FRAME_S), int(SPREAD_S / FRAME_S)
    latencies: list[float] = []
    pacer = Pacer(FRAME_S) if shared_pacer else None
    connecting = time.perf_counter()
    ready = await asyncio.gather(*(_connect(base, server, i) for i in range(calls)))
    setup = time.perf_counter() - connecting
    audio = time.perf_counter() + FRAME_S
    steady = audio + SPREAD_S  # every call streams from here to the level's end
    # Call i starts i/N of the spread late and streams as many frames fewer: all end together.
    starts = [
        (audio + i * SPREAD_S / calls, frames + spread - i * spread // calls) for i in range(calls)
    ]
    backs = await asyncio.gather(
        *(
            _call(ws, session_id, began, count, steady, latencies, pacer)
            for (ws, session_id), (began, count) in zip(ready, starts, strict=True)
        )
    )
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)] if latencies else float("inf")
    p50 = statistics.median(latencies) if latencies else float("inf")
    expected = sum(count for _, count in starts)
    return Level(server, calls, expected, sum(backs), p50 * 1000, p99 * 1000, setup * 1000)


def _ramp(server: str, levels: list[int], seconds: float, shared_pacer: bool) -> list[Level]:
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.transport", server], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        base = f"ws://127.0.0.1:{int(child.stdout.readline())}"
        measured = []
        for calls in levels:
            level = run(_level(base, server, calls, seconds, shared_pacer))
            measured.append(level)
            if not level.sustained:
                break
        return measured
    finally:
        child.kill()
        child.wait()


def run_transport_benchmarks(
    levels: list[int], seconds: float, *, shared_pacer: bool = False
) -> dict[str, list[Level]]:
    """The ramp of each server: the voxwire OVP gateway, then the bare websockets echo. The load
    generator paces each call on its own sleeps, or all of them on one shared
    :class:`~benchmarks.pacer.Pacer`."""
    return {server: _ramp(server, levels, seconds, shared_pacer) for server in ("ovp", "echo")}


def sustained(ramp: list[Level]) -> int:
    """The most calls of a ramp that met the bound (0 when even the first level failed)."""
    return max((level.calls for level in ramp if level.sustained), default=0)


if __name__ == "__main__":
    run({"ovp": _serve_ovp, "echo": _serve_echo}[sys.argv[1]]())
