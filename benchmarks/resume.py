"""How long an OVP resume takes when the gateway must replay a full buffer: 4,096 events.

The gateway runs in this process. A raw client (plain ``websockets``, as the load generator of
``benchmarks.transport``) takes ``session.start``, then drops its connection; while it is away
the gateway's application sends ``REPLAY_EVENTS`` events (the replay buffer's bound), which go to
the replay buffer only. The client reconnects with ``session.resume`` naming the last seq it
processed, and the clock runs from the new connection to the last replayed event. A round
succeeds when every event arrives once, in order; a round whose link is closed, or that stalls
past ``ROUND_TIMEOUT_S``, is reported as failed with what arrived.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from benchmarks.timing import run
from benchmarks.transport import AGENT, CALL, SECRET, TENANT
from voxwire import ovp
from voxwire.ovp._upgrade import OfferingConnection  # offers orbit-voice/1.0 verbatim
from voxwire.ovp.gateway import Gateway, GatewaySession, mint_token

__all__ = ["Resume", "resume_table", "run_resume_benchmark"]

REPLAY_EVENTS = ovp.REPLAY_BUFFER_MAX_EVENTS
ROUND_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Resume:
    """The median round: how many of ``expected`` replayed events came, in how long."""

    expected: int
    received: int
    seconds: float
    rounds: int
    failed: int
    """Rounds that did not deliver every replayed event."""

    @property
    def completed(self) -> bool:
        return self.failed == 0


class _App:
    """The gateway's application: sends the burst once told the client is gone."""

    def __init__(self) -> None:
        self.away: dict[str, asyncio.Event] = {}
        self.sent: dict[str, asyncio.Event] = {}

    async def __call__(self, session: GatewaySession) -> None:
        away = self.away.setdefault(session.session_id, asyncio.Event())
        sent = self.sent.setdefault(session.session_id, asyncio.Event())
        session.start(CALL, AGENT)
        await away.wait()
        while session.connected:  # the gateway has not noticed the drop yet
            await asyncio.sleep(0.001)
        for n in range(REPLAY_EVENTS):
            session.send_agent_thinking(turn_id="t1", delta=f"d{n}")
        sent.set()
        async for _ in session:
            pass


async def _open(url: str) -> ClientConnection:
    return await connect(
        url, create_connection=OfferingConnection, compression=None, max_size=2**18
    )


async def _round(gateway: Gateway, app: _App, index: int) -> tuple[int, float]:
    session_id = f"ovps_resume_{index}_{time.monotonic_ns()}"
    token = mint_token(SECRET, session_id=session_id, tenant_id=TENANT)
    url = f"{gateway.url}/voice/ws/{session_id}?token={token}"
    ws = await _open(url)
    start = json.loads(await ws.recv())
    assert start["type"] == "session.start", start
    last = start["seq"]
    ws.transport.abort()
    app.away.setdefault(session_id, asyncio.Event()).set()
    await app.sent.setdefault(session_id, asyncio.Event()).wait()
    began = time.perf_counter()
    ws = await _open(url)
    resume = {
        **{"type": "session.resume", "seq": 1, "ts": "2026-05-14T12:34:56Z"},
        **{"session_id": session_id, "last_server_seq": last},
    }
    await ws.send(json.dumps(resume))
    received = 0
    try:
        async with asyncio.timeout(ROUND_TIMEOUT_S):
            async for message in ws:
                if isinstance(message, str) and json.loads(message)["type"] == "agent.thinking":
                    received += 1
                    if received == REPLAY_EVENTS:
                        break
    except (TimeoutError, ConnectionClosed):
        pass
    seconds = time.perf_counter() - began
    await ws.close()
    return received, seconds


async def _run(rounds: int) -> Resume:
    app = _App()
    async with Gateway(app, secret=SECRET) as gateway:
        results = [await _round(gateway, app, index) for index in range(rounds)]
    times = [seconds for received, seconds in results if received == REPLAY_EVENTS]
    failed = len(results) - len(times)
    median_received = statistics.median_low([received for received, _ in results])
    seconds = statistics.median(times) if times else float("nan")
    return Resume(REPLAY_EVENTS, median_received, seconds, rounds, failed)


def run_resume_benchmark(rounds: int) -> Resume:
    """``rounds`` resumes, each replaying ``REPLAY_EVENTS`` events."""
    return run(_run(rounds))


def resume_table(result: Resume) -> str:
    """The markdown table of a run."""
    verdict = "completed" if result.completed else f"FAILED in {result.failed} of {result.rounds}"
    return "\n".join(
        [
            f"## OVP resume replaying {result.expected:,} events "
            f"(median of {result.rounds} rounds)",
            "",
            "| replayed events | received | seconds | events per second | rounds |",
            "|---:|---:|---:|---:|---|",
            f"| {result.expected:,} | {result.received:,} | {result.seconds:.3f} | "
            f"{result.expected / result.seconds if result.completed else 0:,.0f} | {verdict} |",
            "",
        ]
    )
