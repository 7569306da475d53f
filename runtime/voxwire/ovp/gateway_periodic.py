"""The gateway's periodic events: ``call.quality.update`` and ``agent.cost.tick``, each on its
cadence (the spec's ``quality_update_interval_ms`` and ``cost_tick_interval_ms``: "Every 5s").

Not public: :class:`~voxwire.ovp.gateway_core.GatewayCore` sends them, and
:class:`~voxwire.ovp.gateway.GatewaySession` supplies what it measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from voxwire.ovp import COST_TICK_INTERVAL_MS, QUALITY_UPDATE_INTERVAL_MS, CostBreakdown

__all__ = ["COST_INTERVAL", "QUALITY_INTERVAL", "Quality", "next_due", "total_cost"]

QUALITY_INTERVAL: Final = QUALITY_UPDATE_INTERVAL_MS / 1000
"""Seconds between two ``call.quality.update``."""
COST_INTERVAL: Final = COST_TICK_INTERVAL_MS / 1000
"""Seconds between two ``agent.cost.tick``."""


@dataclass(frozen=True, slots=True)
class Quality:
    """The values of one ``call.quality.update``."""

    packet_loss_pct: float
    jitter_ms: float
    rtt_ms: float
    mos: float


def total_cost(cost: CostBreakdown) -> int:
    """The total of a cost breakdown, in micro-dollars."""
    return (
        cost.llm_usd_micros
        + cost.stt_usd_micros
        + cost.tts_usd_micros
        + cost.voice_termination_usd_micros
    )


def next_due(due: float, now: float, interval: float) -> float:
    """The next cadence slot after ``now`` (a stall skips slots rather than bursting)."""
    due += interval
    return due if due > now else now + interval
