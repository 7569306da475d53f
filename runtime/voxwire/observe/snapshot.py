"""The frozen figures of a session: what :meth:`voxwire.observe.stats.SessionStats.snapshot`
gives.

:class:`~voxwire.observe.stats.SessionStats` counts; a :class:`Snapshot` is what it counted at
one moment, immutable, in plain values (seconds as floats, counts as ints), so it can be kept,
compared, exported or drawn. docs/observability.md defines every figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "LATENCY_BOUNDS_MS",
    "Direction",
    "Durations",
    "Point",
    "Resume",
    "Snapshot",
    "ToolCall",
    "Turn",
]

LATENCY_BOUNDS_MS: Final = (100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000)
"""The upper bounds (inclusive) of the histogram buckets of turn latencies and tool call
durations, in milliseconds; one more bucket holds what is over the last."""
_US: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class Durations:
    """How long something took, each time: count, total, extremes and a histogram."""

    count: int
    total: float
    """Seconds, all together."""
    minimum: float | None
    maximum: float | None
    histogram: tuple[int, ...]
    """How many took at most each of :data:`LATENCY_BOUNDS_MS` (and more than the one
    before); the last one counts those over the last bound."""

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


@dataclass(frozen=True, slots=True)
class Point:
    """One bucket of the plot series of a direction: from ``t`` for ``width`` seconds."""

    t: float
    width: float
    messages: int
    frames: int
    missing: int
    """Frames skipped by the frames that arrived in the bucket."""
    jitter_ms: float | None
    """The highest jitter after a frame of the bucket."""


@dataclass(frozen=True, slots=True)
class Direction:
    """What one sender sent, as it passed."""

    sender: str
    messages: int
    """Messages read (text frames that decoded)."""
    message_bytes: int
    """Bytes of the messages read and of those that did not decode."""
    unreadable: int
    """Messages and frames that decoded to nothing."""
    seq_gaps: int
    """Jumps of the message sequence number."""
    seq_missing: int
    """Numbers the jumps skipped: messages written that were never read."""
    seq_repeats: int
    """Messages whose number was not above the last (a replayed duplicate, a refusal outside
    the stream): counted here, read for nothing else."""
    frames: int
    silent_frames: int
    audio_s: float
    """Seconds of audio the frames carry."""
    silence_s: float
    """Seconds of audio flagged as silence."""
    frame_gaps: int
    """Jumps of the frame counter."""
    frames_missing: int
    """Frames the jumps skipped."""
    frames_late: int
    """Frames at or behind the highest counter already seen (reordered or repeated)."""
    jitter_ms: float | None
    """RFC 3550 interarrival jitter after the last frame; None before two frames compare."""
    jitter_max_ms: float | None
    series: tuple[Point, ...]
    """The non-empty buckets of the plot series, in time order."""


@dataclass(frozen=True, slots=True)
class Turn:
    """A user's turn: when it ended, and when the agent's first output answered it."""

    ended_at: float
    answered_at: float | None

    @property
    def latency(self) -> float | None:
        return None if self.answered_at is None else _round(self.answered_at - self.ended_at)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call: its key and tool, when it started and ended, and how."""

    key: str
    name: str
    started_at: float
    ended_at: float | None
    outcome: str | None
    """``ok``, ``error`` or ``cancelled``; None while no outcome came."""
    stated_ms: int | None
    """The duration the outcome states itself, where the protocol carries one."""

    @property
    def duration(self) -> float | None:
        return None if self.ended_at is None else _round(self.ended_at - self.started_at)


@dataclass(frozen=True, slots=True)
class Resume:
    """A resumed session: when its link was lost (if a loss was seen) and resumed."""

    lost_at: float | None
    resumed_at: float
    replayed: int
    """Events of the other side sent again after the resume (made before it)."""
    events_lost: int
    """Events the loss report that came first after the resume says were lost."""

    @property
    def duration(self) -> float | None:
        return None if self.lost_at is None else _round(self.resumed_at - self.lost_at)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything :class:`SessionStats` has counted, frozen at one moment."""

    protocol: str
    started_at: float | None
    """The time of the first input, None before any."""
    last_at: float | None
    """The time of the last input."""
    directions: Mapping[str, Direction]
    """By sender (read-only), in the spec's order of the senders."""
    links: int
    """Connections: the first, and one more for each link event ``open``."""
    link_losses: int
    turns: int
    turns_answered: int
    turn_latency: Durations
    turn_list: tuple[Turn, ...]
    tool_calls: int
    tool_outcomes: Mapping[str, int]
    """Ended tool calls by outcome (``ok``, ``error``, ``cancelled``)."""
    tool_durations: Durations
    tool_list: tuple[ToolCall, ...]
    resumes: int
    resume_list: tuple[Resume, ...]
    events_replayed: int
    """Events replayed after all resumes together."""
    events_lost: int
    """Events the loss reports say never reached their receiver, all together."""

    @property
    def duration(self) -> float:
        if self.started_at is None or self.last_at is None:
            return 0.0
        return _round(self.last_at - self.started_at)


def _round(seconds: float) -> float:
    """A difference of two times, to the microsecond they were kept in."""
    return round(seconds * _US) / _US
