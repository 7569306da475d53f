"""The engine side's link settings and its reconnect policy, sans-I/O.

:class:`LinkSettings` holds the bounds of every agent link (the document's defaults, in seconds);
:class:`Backoff` says when a lost link is opened again, with :func:`backoff_factor`, a factor
stable for a call and spread across calls. :class:`~voxwire.brisvox.engine_core.EngineCore` runs
them; :mod:`voxwire.brisvox.engine_config` reads the settings a deployment overrides.

Every name here is importable from :mod:`voxwire.brisvox.engine_core` too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from voxwire.brisvox.constants import (
    CLOSE_TIMEOUT_MS,
    CONNECT_TIMEOUT_MS,
    ENGINE_EVENT_QUEUE,
    HANDSHAKE_TIMEOUT_MS,
    MAX_WAITING_TOOL_CALLS,
    PING_INTERVAL_MS,
    RECONNECT_ATTEMPTS,
    RECONNECT_BACKOFF_FACTOR,
    RECONNECT_BACKOFF_INITIAL_MS,
    RECONNECT_BACKOFF_MAX_MS,
    RECONNECT_SERIES_RESET_MS,
    RECONNECT_WINDOW_MS,
    SIDE_EFFECT_WAIT_MS,
    SILENCE_TIMEOUT_MS,
    WRITE_TIMEOUT_MS,
)

__all__ = ["Backoff", "LinkSettings", "backoff_factor"]


def _seconds(ms: int) -> float:
    return ms / 1000


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """The engine side's bounds, in seconds (the document's defaults)."""

    connect_timeout: float = _seconds(CONNECT_TIMEOUT_MS)
    handshake_timeout: float = _seconds(HANDSHAKE_TIMEOUT_MS)
    ping_interval: float = _seconds(PING_INTERVAL_MS)
    silence_timeout: float = _seconds(SILENCE_TIMEOUT_MS)
    write_timeout: float = _seconds(WRITE_TIMEOUT_MS)
    close_timeout: float = _seconds(CLOSE_TIMEOUT_MS)
    side_effect_wait: float = _seconds(SIDE_EFFECT_WAIT_MS)
    event_queue: int = ENGINE_EVENT_QUEUE
    """Events waiting to be written; past it the newest are dropped and counted."""
    max_waiting_tools: int = MAX_WAITING_TOOL_CALLS
    reconnect_attempts: int = RECONNECT_ATTEMPTS
    reconnect_window: float = _seconds(RECONNECT_WINDOW_MS)

    def __post_init__(self) -> None:
        for name in (
            "connect_timeout",
            "handshake_timeout",
            "ping_interval",
            "silence_timeout",
            "write_timeout",
            "close_timeout",
            "side_effect_wait",
            "reconnect_window",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"LinkSettings.{name} must be positive, not {getattr(self, name)}")
        if self.event_queue < 1 or self.max_waiting_tools < 1 or self.reconnect_attempts < 0:
            raise ValueError(
                "LinkSettings: event_queue and max_waiting_tools must be at least 1, "
                "reconnect_attempts at least 0"
            )


class Backoff:
    """When to reopen a lost link: doubling from 100 ms to 2 s times a stable factor, at most
    ``attempts`` attempts in one series, none more than ``window`` seconds after the loss, and a
    fresh series after a link that lived 5 s."""

    def __init__(self, factor: float, attempts: int, window: float) -> None:
        low, high = RECONNECT_BACKOFF_FACTOR
        if not low <= factor <= high:
            raise ValueError(f"the backoff factor must be in [{low}, {high}], not {factor}")
        self.factor = factor
        self.attempts = attempts
        self.window = window
        self.series = 0
        """Attempts made in the current series."""
        self.outage_attempts = 0
        """Attempts made since the current loss (``resume.attempt`` of the last one)."""
        self._lost_at = 0.0

    def lost(self, now: float, lived: float) -> None:
        """A link was lost at ``now`` after ``lived`` seconds up."""
        if lived >= _seconds(RECONNECT_SERIES_RESET_MS):
            self.series = 0
        self.outage_attempts = 0
        self._lost_at = now

    def next_delay(self, now: float) -> float | None:
        """Seconds to wait before the next attempt, or None when reconnecting is over."""
        if self.series >= self.attempts:
            return None
        delay = min(
            _seconds(RECONNECT_BACKOFF_INITIAL_MS) * (1 << self.series),
            _seconds(RECONNECT_BACKOFF_MAX_MS),
        )
        delay *= self.factor
        if now + delay > self._lost_at + self.window:
            return None
        self.series += 1
        self.outage_attempts += 1
        return delay

    def down_ms(self, now: float) -> int:
        """Milliseconds since the loss."""
        return max(0, int((now - self._lost_at) * 1000))


def backoff_factor(session_id: str) -> float:
    """A factor in [0.5, 1] stable for a call and spread across calls."""
    low, high = RECONNECT_BACKOFF_FACTOR
    digest = hashlib.sha256(session_id.encode()).digest()
    return low + (high - low) * int.from_bytes(digest[:8], "big") / 2**64
