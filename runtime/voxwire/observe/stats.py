"""Per-session statistics computed from the protocol: sans-I/O, every time passed in.

One :class:`SessionStats` per session takes what passes on its links, each input with its time
in seconds (any clock's, the same for all inputs), and gives a frozen
:class:`~voxwire.observe.snapshot.Snapshot` at any moment. It reads no clock and touches no
socket, so a role can feed it live and a capture can be replayed into it (``voxwire report``
does):

```text
stats = SessionStats.of("ovp")
stats.on_message("server", message, t, size=len(data))   # a decoded message, its bytes
stats.on_frame("client", frame, t)                        # a decoded audio frame
stats.on_unreadable("client", t, size=len(data))          # something that decodes to nothing
stats.on_link("lost", t)                                  # lost, closed or open
snapshot = stats.snapshot()
```

Which messages end the user's turn, answer it, start and end a tool call, resume the session or
report lost events, and which frame fields count and stamp the audio, is the protocol's spec
(``statistics:``, read from the generated :class:`~voxwire.observe.marks.Marks`); this module
knows no protocol by name. docs/observability.md defines every figure. Times are kept in whole
microseconds, so every duration is exact for inputs given to the microsecond (as captures are);
the jitter is RFC 3550's, in integers. Memory is bounded however long the session: at most
:data:`MAX_LISTED` turns, tool calls and resumes are listed (all are counted), and the plot
series has at most :data:`MAX_POINTS` points (its buckets double in width as the session grows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from types import MappingProxyType
from typing import Any, Final

from voxwire.errors import VoxwireError
from voxwire.observe.marks import Marks
from voxwire.observe.snapshot import (
    LATENCY_BOUNDS_MS,
    Direction,
    Durations,
    Point,
    Resume,
    Snapshot,
    ToolCall,
    Turn,
)

__all__ = [
    "FIRST_WIDTH_S",
    "MAX_LISTED",
    "MAX_OPEN_TOOL_CALLS",
    "MAX_POINTS",
    "SessionStats",
    "StatsError",
]

MAX_LISTED: Final = 1000
"""The most turns, tool calls and resumes a snapshot lists (the first ones); all are counted."""
MAX_OPEN_TOOL_CALLS: Final = 1024
"""The most tool calls awaiting their outcome at once; a call past it is counted, never ended."""
MAX_POINTS: Final = 512
"""The most points of the plot series: past it, the buckets double in width."""
FIRST_WIDTH_S: Final = 0.02
"""The width of the plot series' buckets while the session is short: one 20 ms frame."""
LINK_EVENTS: Final = ("lost", "closed", "open")
OUTCOMES: Final = ("ok", "error", "cancelled")

_US: Final = 1_000_000
_FIRST_WIDTH_US: Final = round(FIRST_WIDTH_S * _US)


class StatsError(VoxwireError, ValueError):
    """An input the statistics cannot take: names the input and what is wrong with it."""


class _Durations:
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
class _Cell:
    """One direction's part of a bucket of the plot series."""

    messages: int = 0
    frames: int = 0
    missing: int = 0
    jitter_ms: float | None = None

    def merge(self, other: _Cell) -> None:
        self.messages += other.messages
        self.frames += other.frames
        self.missing += other.missing
        self.jitter(other.jitter_ms)

    def jitter(self, ms: float | None) -> None:
        if ms is not None and (self.jitter_ms is None or ms > self.jitter_ms):
            self.jitter_ms = ms


class _Series:
    """Buckets of both directions on one time grid; their width doubles to stay bounded."""

    def __init__(self) -> None:
        self.origin: int | None = None
        self.width = _FIRST_WIDTH_US
        self.buckets: dict[int, tuple[_Cell, _Cell]] = {}

    def cell(self, side: int, us: int) -> _Cell:
        if self.origin is None:
            self.origin = us
        index = max(0, us - self.origin) // self.width
        while index >= MAX_POINTS:
            self._coarsen()
            index //= 2
        row = self.buckets.get(index)
        if row is None:
            row = self.buckets[index] = (_Cell(), _Cell())
        return row[side]

    def _coarsen(self) -> None:
        merged: dict[int, tuple[_Cell, _Cell]] = {}
        for index in sorted(self.buckets):
            row = self.buckets[index]
            into = merged.setdefault(index // 2, row)
            if into is not row:
                into[0].merge(row[0])
                into[1].merge(row[1])
        self.buckets = merged
        self.width *= 2

    def points(self, side: int) -> tuple[Point, ...]:
        origin = self.origin or 0
        out = []
        for index in sorted(self.buckets):
            c = self.buckets[index][side]
            if c.messages or c.frames:
                t = (origin + index * self.width) / _US
                out.append(Point(t, self.width / _US, c.messages, c.frames, c.missing, c.jitter_ms))
        return tuple(out)


@dataclass(slots=True)
class _Side:
    """What one sender sent so far."""

    index: int
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


@dataclass(slots=True)
class _Turn:
    ended_at: int
    answered_at: int | None = None


@dataclass(slots=True)
class _Resume:
    lost_at: int | None
    resumed_at: int
    replayed: int = 0
    events_lost: int = 0


@dataclass(slots=True)
class _Call:
    key: Any
    name: str
    started_at: int
    ended_at: int | None = None
    outcome: str | None = None
    stated_ms: int | None = None


@dataclass(slots=True)
class _State:
    first: int | None = None
    last: int | None = None
    links: int = 1
    link_losses: int = 0
    lost_at: int | None = None
    turns: list[_Turn] = field(default_factory=list)
    turn_count: int = 0
    answered: int = 0
    pending: _Turn | None = None
    """The last user's turn while no output answered it."""
    calls: list[_Call] = field(default_factory=list)
    call_count: int = 0
    open_calls: dict[Any, _Call] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    resumes: list[_Resume] = field(default_factory=list)
    resume_count: int = 0
    resume: _Resume | None = None
    """The last resume, while its loss report may still come."""
    heard: set[str] = field(default_factory=set)
    """The senders heard from since the last resume (its own message aside)."""
    replaying: tuple[str, Any] | None = None
    """(the resume's sender, its stamp) while the other side's replayed events may come."""
    events_replayed: int = 0
    events_lost: int = 0


class SessionStats:
    """The statistics of one session, fed its messages, frames and link events in order."""

    def __init__(self, marks: Marks) -> None:
        self._marks = marks
        self._sides = {sender: _Side(i) for i, sender in enumerate(marks.senders)}
        self._series = _Series()
        self._state = _State()
        self._latency = _Durations()
        self._durations = _Durations()
        self._read_types = frozenset(
            [m.type for m in (*marks.turn_end, *marks.turn_output)]
            + [o.type for o in marks.tool_outcomes]
            + [marks.tool_call.type]
            + [m.type for m in (marks.resume, marks.loss_report) if m is not None]
        )
        """The message types the marks name: any other type means nothing more."""

    @classmethod
    def of(cls, protocol: str) -> SessionStats:
        """The statistics of a session of ``protocol`` (``brisvox``, ``ovp``)."""
        try:
            module = import_module(f"voxwire.{protocol}.statistics")
        except ModuleNotFoundError:
            raise StatsError(f"no statistics for protocol {protocol!r}") from None
        marks: Marks = module.STATISTICS
        return cls(marks)

    # -- inputs -----------------------------------------------------------------------------

    def on_message(self, sender: str, message: Any, t: float, *, size: int) -> None:
        """``sender``'s ``message`` (decoded), ``size`` bytes on the wire, passed at ``t``."""
        side, us = self._side(sender), self._time(t)
        side.messages += 1
        side.message_bytes += size
        self._series.cell(side.index, us).messages += 1
        marks, state = self._marks, self._state
        if state.replaying is not None and sender != state.replaying[0]:
            self._replayed(message)
        if marks.sequence is not None and sender in marks.sequenced:
            seq, last = getattr(message, marks.sequence), side.seq
            if last is not None and seq <= last:
                side.seq_repeats += 1
                return
            if last is not None and seq > last + 1:
                side.seq_gaps += 1
                side.seq_missing += seq - last - 1
            side.seq = seq
        self._read(sender, message, us)

    def on_frame(self, sender: str, frame: Any, t: float) -> None:
        """``sender``'s audio ``frame`` (decoded), passed at ``t``."""
        side, us = self._side(sender), self._time(t)
        marks = self._marks.frames
        if marks is None:
            raise StatsError(f"{self._marks.protocol} carries no audio frames")
        side.frames += 1
        if getattr(frame, marks.flags) & marks.silence_mask:
            side.silent_frames += 1
        seq, clock = getattr(frame, marks.sequence), getattr(frame, marks.clock)
        cell = self._series.cell(side.index, us)
        cell.frames += 1
        if side.frame_seq is not None:
            ahead = (seq - side.frame_seq) % marks.sequence_modulus
            if ahead == 0 or ahead >= marks.sequence_modulus // 2:
                side.frames_late += 1
            else:
                side.frame_seq = seq
                if ahead > 1:
                    side.frame_gaps += 1
                    side.frames_missing += ahead - 1
                    cell.missing += ahead - 1
        else:
            side.frame_seq = seq
        if side.previous is not None:
            self._jitter(side, us, clock, seq, cell)
        side.previous = (us, clock, seq)

    def on_unreadable(self, sender: str, t: float, *, size: int) -> None:
        """``sender`` sent ``size`` bytes at ``t`` that decode to no message or frame."""
        side = self._side(sender)
        self._time(t)
        side.unreadable += 1
        side.message_bytes += size

    def on_link(self, event: str, t: float) -> None:
        """The session's link was ``lost`` or ``closed``, or a new one is ``open``, at ``t``."""
        if event not in LINK_EVENTS:
            raise StatsError(f"a link event is one of {LINK_EVENTS}, not {event!r}")
        us, state = self._time(t), self._state
        for side in self._sides.values():
            side.previous = None  # no jitter across links: the outage is no network's
        if event == "open":
            state.links += 1
            return
        state.link_losses += event == "lost"
        state.lost_at = us
        state.pending = None  # a turn cut by the loss is not answered
        state.replaying = None

    # -- the snapshot -----------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Everything counted so far, frozen."""
        state, marks = self._state, self._marks
        frames_ms = marks.frames.duration_ms if marks.frames is not None else 0
        directions = {s: self._direction(s, side, frames_ms) for s, side in self._sides.items()}
        return Snapshot(
            protocol=marks.protocol,
            started_at=None if state.first is None else state.first / _US,
            last_at=None if state.last is None else state.last / _US,
            directions=MappingProxyType(directions),
            links=state.links,
            link_losses=state.link_losses,
            turns=state.turn_count,
            turns_answered=state.answered,
            turn_latency=self._latency.frozen(),
            turn_list=tuple(
                Turn(x.ended_at / _US, None if x.answered_at is None else x.answered_at / _US)
                for x in state.turns
            ),
            tool_calls=state.call_count,
            tool_outcomes=MappingProxyType(dict(state.outcomes)),
            tool_durations=self._durations.frozen(),
            tool_list=tuple(
                ToolCall(
                    str(c.key),
                    c.name,
                    c.started_at / _US,
                    None if c.ended_at is None else c.ended_at / _US,
                    c.outcome,
                    c.stated_ms,
                )
                for c in state.calls
            ),
            resumes=state.resume_count,
            resume_list=tuple(
                Resume(
                    None if r.lost_at is None else r.lost_at / _US,
                    r.resumed_at / _US,
                    r.replayed,
                    r.events_lost,
                )
                for r in state.resumes
            ),
            events_replayed=state.events_replayed,
            events_lost=state.events_lost,
        )

    # -- the rest ---------------------------------------------------------------------------

    def _side(self, sender: str) -> _Side:
        side = self._sides.get(sender)
        if side is None:
            raise StatsError(f"sender must be one of {self._marks.senders}, not {sender!r}")
        return side

    def _time(self, t: float) -> int:
        try:
            us = round(t * _US)  # NaN, infinities and what is no number raise
        except (TypeError, ValueError, OverflowError):
            raise StatsError(f"a time is a finite number of seconds, not {t!r}") from None
        state = self._state
        if state.last is None:
            state.first = state.last = us
        elif us > state.last:
            state.last = us
        return us

    def _jitter(self, side: _Side, us: int, clock: int, seq: int, cell: _Cell) -> None:
        """RFC 3550 (6.4.1, A.8): J += (|D| - J) / 16 with D = (Rj - Ri) - (Sj - Si), in
        integers: J kept times 16, D in microseconds times the media clock units per frame."""
        marks = self._marks.frames
        assert marks is not None and side.previous is not None
        before, before_clock, before_seq = side.previous
        half = marks.clock_modulus // 2
        if side.units is None and (seq - before_seq) % marks.sequence_modulus == 1:
            step = (clock - before_clock) % marks.clock_modulus
            side.units = step if 0 < step < half else None
        if side.units is None:
            return
        clock_step = (clock - before_clock + half) % marks.clock_modulus - half
        d = (us - before) * side.units - clock_step * marks.duration_ms * 1000
        side.jitter16 += abs(d) - ((side.jitter16 + 8) >> 4)
        side.jitter16_max = max(side.jitter16_max, side.jitter16)
        side.jittered = True
        cell.jitter(side.jitter16 / (16_000 * side.units))

    def _direction(self, sender: str, side: _Side, frame_ms: int) -> Direction:
        scale = 16_000 * (side.units or 1)
        return Direction(
            sender=sender,
            messages=side.messages,
            message_bytes=side.message_bytes,
            unreadable=side.unreadable,
            seq_gaps=side.seq_gaps,
            seq_missing=side.seq_missing,
            seq_repeats=side.seq_repeats,
            frames=side.frames,
            silent_frames=side.silent_frames,
            audio_s=side.frames * frame_ms / 1000,
            silence_s=side.silent_frames * frame_ms / 1000,
            frame_gaps=side.frame_gaps,
            frames_missing=side.frames_missing,
            frames_late=side.frames_late,
            jitter_ms=side.jitter16 / scale if side.jittered else None,
            jitter_max_ms=side.jitter16_max / scale if side.jittered else None,
            series=self._series.points(side.index),
        )

    def _read(self, sender: str, message: Any, us: int) -> None:
        """What a message in its place (no repeat) means for turns, tools, resumes and loss."""
        marks, state = self._marks, self._state
        if state.resume is not None and sender not in state.heard:
            state.heard.add(sender)
            if marks.loss_report is not None and message.type == marks.loss_report.type:
                state.resume.events_lost += getattr(message, marks.loss_report.count)
        if message.type not in self._read_types:
            return
        if any(mark.matches(message) for mark in marks.turn_end):
            self._turn_ended(us)
        elif state.pending is not None and any(m.matches(message) for m in marks.turn_output):
            self._latency.add(us - state.pending.ended_at)
            state.answered += 1
            state.pending.answered_at = us
            state.pending = None
        if message.type == marks.tool_call.type:
            self._call(message, us)
        else:
            self._outcome(message, us)
        if marks.resume is not None and marks.resume.matches(message):
            self._resumed(sender, message, us)
        elif marks.loss_report is not None and message.type == marks.loss_report.type:
            state.events_lost += getattr(message, marks.loss_report.count)

    def _turn_ended(self, us: int) -> None:
        state = self._state
        state.turn_count += 1
        state.pending = _Turn(us)
        if len(state.turns) < MAX_LISTED:
            state.turns.append(state.pending)

    def _call(self, message: Any, us: int) -> None:
        marks, state = self._marks.tool_call, self._state
        state.call_count += 1
        if len(state.open_calls) >= MAX_OPEN_TOOL_CALLS:
            return
        call = _Call(getattr(message, marks.key), str(getattr(message, marks.name)), us)
        state.open_calls[call.key] = call
        if len(state.calls) < MAX_LISTED:
            state.calls.append(call)

    def _outcome(self, message: Any, us: int) -> None:
        state = self._state
        for mark in self._marks.tool_outcomes:
            if mark.matches(message):
                call = state.open_calls.pop(getattr(message, mark.key), None)
                if call is None:
                    return  # late, or for a call never seen: the protocol ignores it too
                call.ended_at, call.outcome = us, mark.outcome
                if mark.duration_ms is not None:
                    call.stated_ms = getattr(message, mark.duration_ms)
                state.outcomes[mark.outcome] += 1
                self._durations.add(us - call.started_at)
                return

    def _resumed(self, sender: str, message: Any, us: int) -> None:
        state, mark = self._state, self._marks.resume
        assert mark is not None
        state.resume_count += 1
        resume = _Resume(state.lost_at, us)
        state.lost_at = None
        if len(state.resumes) < MAX_LISTED:
            state.resumes.append(resume)
        state.resume, state.heard = resume, set()
        if mark.replayed_before is not None:
            state.replaying = (sender, getattr(message, mark.replayed_before))

    def _replayed(self, message: Any) -> None:
        state, mark = self._state, self._marks.resume
        assert state.replaying is not None and state.resume is not None and mark is not None
        assert mark.replayed_before is not None
        if getattr(message, mark.replayed_before) < state.replaying[1]:
            state.resume.replayed += 1
            state.events_replayed += 1
        else:
            state.replaying = None  # the first event made after the resume: the replay is over
