"""What :mod:`voxwire.observe.stats` keeps per sender and over time: each sender's counts
(:class:`Side`), the durations' tallies (:class:`Tally`) and the plot series (:class:`Series`).

Not public: :class:`~voxwire.observe.stats.SessionStats` owns them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from voxwire.observe.snapshot import LATENCY_BOUNDS_MS, Durations, Point

__all__ = ["FIRST_WIDTH_S", "MAX_POINTS", "Cell", "Series", "Side", "Tally"]

MAX_POINTS: Final = 512
"""The most points of the plot series: past it, the buckets double in width."""
FIRST_WIDTH_S: Final = 0.02
"""The width of the plot series' buckets while the session is short: one 20 ms frame."""

_US: Final = 1_000_000
_FIRST_WIDTH_US: Final = round(FIRST_WIDTH_S * _US)


class Tally:
    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.minimum: int | None = None
        self.maximum: int | None = None
        self.histogram = [0] * (len(LATENCY_BOUNDS_MS) + 1)

    def add(self, us: int) -> None:
        self.count += 1
        self.total += us
        self.minimum = us if self.minimum is None else min(self.minimum, us)
        self.maximum = us if self.maximum is None else max(self.maximum, us)
        bucket = next(
            (i for i, bound in enumerate(LATENCY_BOUNDS_MS) if us <= bound * 1000),
            len(LATENCY_BOUNDS_MS),
        )
        self.histogram[bucket] += 1

    def frozen(self) -> Durations:
        return Durations(
            self.count,
            self.total / _US,
            None if self.minimum is None else self.minimum / _US,
            None if self.maximum is None else self.maximum / _US,
            tuple(self.histogram),
        )


@dataclass(slots=True)
class Cell:
    """One direction's part of a bucket of the plot series."""

    messages: int = 0
    frames: int = 0
    missing: int = 0
    jitter16: int = -1
    """The highest jitter after a frame of the bucket, as its side keeps it (-1: none)."""

    def merge(self, other: Cell) -> None:
        self.messages += other.messages
        self.frames += other.frames
        self.missing += other.missing
        self.jitter16 = max(self.jitter16, other.jitter16)


class Series:
    """Buckets of both directions on one time grid; their width doubles to stay bounded."""

    def __init__(self, sides: list[Side]) -> None:
        self.origin: int | None = None
        self.width = _FIRST_WIDTH_US
        self.buckets: dict[int, tuple[Cell, Cell]] = {}
        self._sides = sides

    def cell(self, side: Side, us: int) -> Cell:
        """``side``'s cell of the bucket ``us`` falls in, kept as the side's cached cell."""
        if self.origin is None:
            self.origin = us
        index = max(0, us - self.origin) // self.width
        while index >= MAX_POINTS:
            self._coarsen()
            index //= 2
        row = self.buckets.get(index)
        if row is None:
            row = self.buckets[index] = (Cell(), Cell())
        cell = side.cell = row[side.index]
        side.cell_from = self.origin + index * self.width if index else -(2**62)
        side.cell_to = self.origin + (index + 1) * self.width
        return cell

    def _coarsen(self) -> None:
        merged: dict[int, tuple[Cell, Cell]] = {}
        for index in sorted(self.buckets):
            row = self.buckets[index]
            into = merged.setdefault(index // 2, row)
            if into is not row:
                into[0].merge(row[0])
                into[1].merge(row[1])
        self.buckets = merged
        self.width *= 2
        for side in self._sides:  # their cached cells may have merged away
            side.cell, side.cell_to = None, -1

    def points(self, side: Side) -> tuple[Point, ...]:
        origin = self.origin or 0
        scale = 16_000 * (side.units or 1)
        out = []
        for index in sorted(self.buckets):
            c = self.buckets[index][side.index]
            if c.messages or c.frames:
                t = (origin + index * self.width) / _US
                jitter_ms = None if c.jitter16 < 0 else c.jitter16 / scale
                out.append(Point(t, self.width / _US, c.messages, c.frames, c.missing, jitter_ms))
        return tuple(out)


@dataclass(slots=True)
class Side:
    """What one sender sent so far."""

    index: int
    sequenced: bool
    """Whether its messages' sequence is judged (a sequenced sender, not this side's own)."""
    messages: int = 0
    message_bytes: int = 0
    unreadable: int = 0
    seq: int | None = None
    seq_gaps: int = 0
    seq_missing: int = 0
    seq_repeats: int = 0
    frames: int = 0
    silent_frames: int = 0
    frame_seq: int | None = None
    frame_gaps: int = 0
    frames_missing: int = 0
    frames_late: int = 0
    units: int | None = None
    """Media clock units per frame, learnt from the first two consecutive frames."""
    previous: tuple[int, int, int] | None = None
    """(arrival us, clock, counter) of the last frame of this link."""
    jitter16: int = 0
    """RFC 3550's J scaled by 16, in units of microseconds times ``units``."""
    jitter16_max: int = 0
    jittered: bool = False
    cell: Cell | None = None
    """The plot series' cell of the bucket the last input fell in, from ``cell_from`` (us) to
    ``cell_to`` (excluded): the next input in the same bucket finds it without a look-up."""
    cell_from: int = 0
    cell_to: int = -1
