"""The gateway's periodic events: ``call.quality.update`` and ``agent.cost.tick``, each on its
cadence (the spec's ``quality_update_interval_ms`` and ``cost_tick_interval_ms``, "Every 5s"),
and the errors about the caller's frames, reported in aggregate (:class:`Reports` says what is
due; the core stamps and streams it).

The gateway sends both every 5 s whether or not its application supplies values, so a client
that sees no WebSocket ping (a browser) always hears from a live gateway well within its idle
bound (``client_idle_timeout_ms``, two cadences). Unless the application set them
(``set_quality``), the quality figures are the gateway's own, measured by :class:`QualityMeter`
from the session's statistics (:mod:`voxwire.observe.stats`) and its link's keepalive:

- ``packet_loss_pct``: the caller's audio frames missing over the last interval, as a share
  of the frames expected (received and missing; 0 when none were expected);
- ``jitter_ms``: the RFC 3550 interarrival jitter of the caller's frames (0 before two frames);
- ``rtt_ms``: the round trip of the link's last keepalive ping (0 before its first pong);
- ``mos``: :func:`estimate_mos` of those three.

A bad frame from the caller is dropped, and reported as an ``error`` at most once per
``frame_error_report_interval_ms`` per code, with the count dropped since the last report.

Not public: :class:`~voxwire.ovp.gateway_core.GatewayCore` sends the events, and
:class:`~voxwire.ovp.gateway_session.GatewaySession` measures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from voxwire.observe.stats import SessionStats
from voxwire.ovp import (
    COST_TICK_INTERVAL_MS,
    FRAME_ERROR_REPORT_INTERVAL_MS,
    QUALITY_UPDATE_INTERVAL_MS,
    RECOVERABLE,
    AgentCostTick,
    CallQualityUpdate,
    CostBreakdown,
    ErrorCode,
    ErrorEvent,
    Message,
)

__all__ = [
    "COST_INTERVAL",
    "NO_COST",
    "QUALITY_INTERVAL",
    "Quality",
    "QualityMeter",
    "Report",
    "Reports",
    "estimate_mos",
    "next_due",
    "total_cost",
]

QUALITY_INTERVAL: Final = QUALITY_UPDATE_INTERVAL_MS / 1000
"""Seconds between two ``call.quality.update``."""
COST_INTERVAL: Final = COST_TICK_INTERVAL_MS / 1000
"""Seconds between two ``agent.cost.tick``."""
NO_COST: Final = CostBreakdown(
    llm_usd_micros=0, stt_usd_micros=0, tts_usd_micros=0, voice_termination_usd_micros=0
)
"""The cost the gateway reports while its application gave none."""
_FRAME_REPORT_INTERVAL: Final = FRAME_ERROR_REPORT_INTERVAL_MS / 1000
_FRAME_ERROR_CODES: Final = (ErrorCode.OVP_AUDIO_FRAME_INVALID, ErrorCode.OVP_SEQ_REGRESSION)
"""The frame errors reported in aggregate, in the order a tick reports them."""

Report: TypeAlias = tuple[type[Message], dict[str, Any]]
"""An event to send: its class and its fields."""


@dataclass(frozen=True, slots=True)
class Quality:
    """The values of one ``call.quality.update``."""

    packet_loss_pct: float
    jitter_ms: float
    rtt_ms: float
    mos: float

    def fields(self) -> dict[str, Any]:
        """The event's fields."""
        return {
            "packet_loss_pct": self.packet_loss_pct,
            "jitter_ms": self.jitter_ms,
            "rtt_ms": self.rtt_ms,
            "mos": self.mos,
        }


def estimate_mos(packet_loss_pct: float, jitter_ms: float, rtt_ms: float) -> float:
    """A mean opinion score (1.0 to 4.5) from the simplified E-model (ITU-T G.107's R factor,
    as VoIP monitors commonly reduce it): the one-way delay ``rtt / 2``, plus twice the jitter
    (a jitter buffer's worth) and 10 ms of codec, lowers R from 93.2 by 1/40 per ms up to 160 ms
    and by 1/10 per ms past 120 ms after that; each percent of loss lowers it by 2.5; then
    ``MOS = 1 + 0.035 R + 7e-6 R (R - 60) (100 - R)``, rounded to two decimals."""
    delay = rtt_ms / 2 + 2 * jitter_ms + 10
    r = 93.2 - (delay / 40 if delay < 160 else (delay - 120) / 10) - 2.5 * packet_loss_pct
    if r <= 0:
        return 1.0
    if r >= 100:
        return 4.5
    return round(min(4.5, max(1.0, 1 + 0.035 * r + 7e-6 * r * (r - 60) * (100 - r))), 2)


class QualityMeter:
    """Measures a session's caller leg for each ``call.quality.update`` (the module says how).

    Args:
        stats: The session's statistics; the caller's frames are ``caller``'s.
        caller: The sender whose audio frames are the caller's leg (OVP: ``client``).
        rtt: The last keepalive round trip in seconds, or None before the first pong.
    """

    def __init__(self, stats: SessionStats, caller: str, rtt: Callable[[], float | None]) -> None:
        self._stats = stats
        self._caller = caller
        self._rtt = rtt
        self._frames = 0
        self._missing = 0

    def __call__(self, now: float) -> Quality:
        """The quality over the interval since the last call."""
        frames, missing, jitter_ms = self._stats.audio(self._caller)
        got, lost = frames - self._frames, missing - self._missing
        self._frames, self._missing = frames, missing
        loss = 100 * lost / (got + lost) if got + lost > 0 else 0.0
        rtt = self._rtt()
        rtt_ms = 0.0 if rtt is None else min(60_000.0, rtt * 1000)
        jitter = min(60_000.0, jitter_ms or 0.0)
        return Quality(
            packet_loss_pct=round(min(100.0, loss), 2),
            jitter_ms=round(jitter, 2),
            rtt_ms=round(rtt_ms, 2),
            mos=estimate_mos(loss, jitter, rtt_ms),
        )


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


class _FrameErrors:
    """Frame errors of one code, reported at most once per interval with a dropped count."""

    def __init__(self) -> None:
        self.dropped = 0
        self.last_detail = ""
        self.next_report = float("-inf")

    def due(self, now: float) -> bool:
        return self.dropped > 0 and now >= self.next_report

    @property
    def deadline(self) -> float | None:
        return self.next_report if self.dropped > 0 else None


class Reports:
    """The periodic events of one session: the quality and cost events on their cadence, the
    caller's frame errors in aggregate.

    Args:
        measure: What the session measured, asked when a ``call.quality.update`` is due and the
            application set no values; with it, both events are always sent (the cost tick with
            zeros until the application sets a cost). Without it, each is sent only once the
            application gave its values.
    """

    def __init__(self, measure: Callable[[float], Quality] | None) -> None:
        self._measure = measure
        self._frame_errors: dict[ErrorCode, _FrameErrors] = {}  # each made at its first error
        self.quality: Quality | None = None
        """The values the application set for the next ``call.quality.update``."""
        self.cost: CostBreakdown | None = None
        """The running cost the next ``agent.cost.tick`` (and session.end's stats) carry."""
        self._next_quality: float | None = None
        self._next_cost: float | None = None

    def start(self, now: float) -> None:
        """The session started at ``now``: each event is due one cadence on."""
        self._next_quality, self._next_cost = now + QUALITY_INTERVAL, now + COST_INTERVAL

    def frame_error(self, code: ErrorCode, detail: str, now: float) -> Report | None:
        """A caller's frame was dropped for ``code``: the error to send, if one is due now."""
        errors = self._frame_errors.get(code)
        if errors is None:
            errors = self._frame_errors[code] = _FrameErrors()
        errors.dropped += 1
        errors.last_detail = detail
        return self._report_frames(code, errors, now) if errors.due(now) else None

    def due(self, now: float) -> list[Report]:
        """What is due by ``now``: the frame errors (in code order), then quality, then cost."""
        out = [
            self._report_frames(code, errors, now)
            for code in _FRAME_ERROR_CODES
            if (errors := self._frame_errors.get(code)) is not None and errors.due(now)
        ]
        if self._next_quality is not None and now >= self._next_quality:
            self._next_quality = next_due(self._next_quality, now, QUALITY_INTERVAL)
            q = self.quality or (self._measure(now) if self._measure is not None else None)
            if q is not None:
                out.append((CallQualityUpdate, q.fields()))
        if self._next_cost is not None and now >= self._next_cost:
            self._next_cost = next_due(self._next_cost, now, COST_INTERVAL)
            cost = self.cost or (NO_COST if self._measure is not None else None)
            if cost is not None:
                tick = {"total_cost_usd_micros": total_cost(cost), "breakdown": cost}
                out.append((AgentCostTick, tick))
        return out

    def next_deadline(self) -> float | None:
        """When the next report may be due, or ``None``."""
        deadlines = [e.deadline for e in self._frame_errors.values() if e.deadline is not None]
        deadlines += [t for t in (self._next_quality, self._next_cost) if t is not None]
        return min(deadlines, default=None)

    @staticmethod
    def _report_frames(code: ErrorCode, errors: _FrameErrors, now: float) -> Report:
        fields = {
            "code": code,
            "message": errors.last_detail,
            "recoverable": RECOVERABLE[code],
            "details": {"dropped_frames": errors.dropped},
        }
        errors.dropped = 0
        errors.next_report = now + _FRAME_REPORT_INTERVAL
        return ErrorEvent, fields
