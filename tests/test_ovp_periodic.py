"""The gateway's 5 s events from its own measurements: call.quality.update and agent.cost.tick
every 5 s with no help from the application, so a quiet client always hears from a live
gateway within its idle bound (spec: quality_update_interval_ms, client-idle-bound)."""

from __future__ import annotations

import asyncio
from itertools import pairwise

from tests.test_ovp_support import AGENT, CALL, PCM, ovp_client, run, serving
from voxwire import ovp
from voxwire.clock import ScaledClock
from voxwire.observe.stats import SessionStats
from voxwire.ovp.gateway import GatewaySession
from voxwire.ovp.gateway_periodic import QualityMeter, estimate_mos

IDLE_BOUND_S = ovp.CLIENT_IDLE_TIMEOUT_MS / 1000


def test_a_quiet_client_hears_the_5_s_events_and_never_resumes() -> None:
    clock = ScaledClock(50)

    async def quiet(session: GatewaySession) -> None:
        session.start(CALL, AGENT)  # and nothing else: no set_quality, no set_cost
        async for _ in session:
            pass

    async def main() -> list[tuple[float, ovp.ServerMessage]]:
        async with serving(quiet, clock=clock) as gateway:
            client = ovp_client(gateway.url, clock)
            heard: list[tuple[float, ovp.ServerMessage]] = []
            for kind in ("call.quality.update", "agent.cost.tick"):
                client.on(kind, lambda message: heard.append((clock.now(), message)))
            await client.connect()
            began = clock.now()
            await clock.sleep(2 * IDLE_BOUND_S + 5.5)  # more than two idle bounds, no traffic
            assert client.reconnects == 0 and client.connected
            await client.close()
            return [(t - began, m) for t, m in heard]

    heard = run(main(), timeout=20)
    qualities = [m for _, m in heard if isinstance(m, ovp.CallQualityUpdate)]
    costs = [m for _, m in heard if isinstance(m, ovp.AgentCostTick)]
    assert len(qualities) >= 4 and len(costs) >= 4  # at 5, 10, 15, 20 (and 25) s
    times = [0.0] + [t for t, _ in heard]
    assert max(b - a for a, b in pairwise(times)) < IDLE_BOUND_S
    quiet_leg = qualities[0]
    assert (quiet_leg.packet_loss_pct, quiet_leg.jitter_ms) == (0, 0)
    assert quiet_leg.mos == estimate_mos(0, 0, quiet_leg.rtt_ms)
    assert all(c.total_cost_usd_micros == 0 for c in costs)


def test_the_application_s_values_replace_the_measured_ones() -> None:
    clock = ScaledClock(50)
    cost = ovp.CostBreakdown(
        llm_usd_micros=1, stt_usd_micros=2, tts_usd_micros=3, voice_termination_usd_micros=4
    )

    async def supplied(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        session.set_quality(packet_loss_pct=1.5, jitter_ms=7.0, rtt_ms=80.0, mos=3.9)
        session.set_cost(cost)
        async for _ in session:
            pass

    async def main() -> tuple[ovp.CallQualityUpdate, ovp.AgentCostTick]:
        async with serving(supplied, clock=clock) as gateway:
            client = ovp_client(gateway.url, clock)
            got: dict[str, ovp.ServerMessage] = {}
            for kind in ("call.quality.update", "agent.cost.tick"):
                client.on(kind, lambda message: got.setdefault(message.type, message))
            await client.connect()
            async with asyncio.timeout(5):
                while len(got) < 2:
                    await asyncio.sleep(0.01)
            await client.close()
            quality, tick = got["call.quality.update"], got["agent.cost.tick"]
            assert isinstance(quality, ovp.CallQualityUpdate)
            assert isinstance(tick, ovp.AgentCostTick)
            return quality, tick

    quality, tick = run(main(), timeout=20)
    assert (quality.packet_loss_pct, quality.jitter_ms, quality.rtt_ms, quality.mos) == (
        1.5,
        7.0,
        80.0,
        3.9,
    )
    assert tick.total_cost_usd_micros == 10 and tick.breakdown == cost


def test_the_meter_measures_loss_over_each_interval_and_the_jitter() -> None:
    stats = SessionStats.of("ovp", own="server")
    rtt: list[float | None] = [None]
    meter = QualityMeter(stats, "client", lambda: rtt[0])

    def frame(seq: int, t: float) -> None:
        stats.on_frame(
            "client",
            ovp.AudioFrame(direction=0, frame_seq=seq, rtp_timestamp=320 * seq, pcm=PCM),
            t,
        )

    assert meter(5.0) == meter(5.0)  # nothing heard: no loss, no jitter, no round trip
    for seq, t in ((0, 6.0), (1, 6.02), (2, 6.045), (4, 6.08)):  # frame 3 missing
        frame(seq, t)
    rtt[0] = 0.04
    first = meter(10.0)
    jitter = 5 / 16
    assert first.packet_loss_pct == 20.0  # 1 of the 5 frames expected
    assert first.jitter_ms == round(jitter + (5 - jitter) / 16, 2)  # frame 4 is 5 ms early
    assert first.rtt_ms == 40.0
    assert first.mos == estimate_mos(20.0, jitter + (5 - jitter) / 16, 40.0)
    frame(5, 10.1)
    assert meter(15.0).packet_loss_pct == 0.0  # the next interval lost nothing


def test_the_mos_estimate_falls_with_loss_delay_and_jitter_and_stays_on_the_scale() -> None:
    best = estimate_mos(0, 0, 0)
    assert best == 4.4  # R = 93.2 - 10 / 40 = 92.95: 1 + 3.253 + 0.151
    assert estimate_mos(1, 0, 0) < best and estimate_mos(0, 0, 400) < best
    assert estimate_mos(0, 30, 0) < best
    assert estimate_mos(100, 0, 0) == 1.0  # R below 0
    assert 1.0 <= estimate_mos(5, 20, 300) <= 4.5
    # The knee at 160 ms of delay: continuous on both sides of it.
    below, above = estimate_mos(0, 0, 2 * 149.999), estimate_mos(0, 0, 2 * 150.001)
    assert abs(below - above) <= 0.01
