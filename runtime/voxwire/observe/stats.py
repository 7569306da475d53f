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
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Final, Protocol

from voxwire.errors import VoxwireError
from voxwire.observe._tally import FIRST_WIDTH_S, MAX_POINTS, Series, Side, Tally
from voxwire.observe.marks import Marks
from voxwire.observe.snapshot import (
    Direction,
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
    "Listener",
    "SessionStats",
    "StatsError",
    "wire_size",
]

MAX_LISTED: Final = 1000
"""The most turns, tool calls and resumes a snapshot lists (the first ones); all are counted."""
MAX_OPEN_TOOL_CALLS: Final = 1024
"""The most tool calls awaiting their outcome at once; a call past it is counted, never ended."""
LINK_EVENTS: Final = ("lost", "closed", "open")
OUTCOMES: Final = ("ok", "error", "cancelled")

_US: Final = 1_000_000


def wire_size(data: str | bytes) -> int:
    """The bytes ``data`` takes on the wire: a text's UTF-8 length (counted without encoding it
    when it is ASCII, as protocol messages mostly are)."""
    if type(data) is str:
        return len(data) if data.isascii() else len(data.encode())
    return len(data)


class Listener(Protocol):
    """Told of a session's moments as its statistics see them (times in seconds, the inputs'
    clock): what :mod:`voxwire.observe.otel` draws as spans. Called only at these moments, never
    per message."""

    def turn_ended(self, t: float) -> None:
        """A user's turn ended."""

    def turn_answered(self, ended_at: float, t: float) -> None:
        """The turn that ended at ``ended_at`` was answered."""

    def tool_started(self, key: str, name: str, t: float) -> None:
        """A tool call began."""

    def tool_ended(self, key: str, outcome: str, started_at: float, t: float) -> None:
        """A tool call ended with ``outcome``."""

    def resumed(self, lost_at: float | None, t: float) -> None:
        """The session resumed on a new link (lost at ``lost_at``, if a loss was seen)."""

    def link(self, event: str, t: float) -> None:
        """The link was ``lost`` or ``closed``, or a new one is ``open``."""


class StatsError(VoxwireError, ValueError):
    """An input the statistics cannot take: names the input and what is wrong with it."""


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


_NEVER: Final = -(2**63)
"""The last time before any input: every time is later."""


def _bad_time(t: object) -> StatsError:
    return StatsError(f"a time is a finite number of seconds, not {t!r}")


@dataclass(slots=True)
class _State:
    first: int | None = None
    last: int = _NEVER
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
    first_after_resume: bool = False
    """Whether a sender was not heard from since the last resume."""
    replaying: tuple[str, Any] | None = None
    """(the resume's sender, its stamp) while the other side's replayed events may come."""
    events_replayed: int = 0
    events_lost: int = 0


class SessionStats:
    """The statistics of one session, fed its messages, frames and link events in order.

    Args:
        marks: What the protocol's statistics read (its generated ``STATISTICS``).
        own: The sender this side is, when a role feeds what it sends as it sends it: its
            messages' sequence is not judged (its own numbering has no gap by construction,
            and Brisvox stamps it only as a message is written). None for a recording of both
            sides, as ``voxwire report`` replays.
    """

    def __init__(self, marks: Marks, *, own: str | None = None) -> None:
        if own is not None and own not in marks.senders:
            raise StatsError(f"own must be one of {marks.senders}, not {own!r}")
        self._marks = marks
        self._own = own
        self.listener: Listener | None = None
        """Told of the session's turns, tool calls, resumes and link events, when set."""
        self._sides = {
            sender: Side(i, sender in marks.sequenced and sender != own)
            for i, sender in enumerate(marks.senders)
        }
        self._series = Series(list(self._sides.values()))
        self._state = _State()
        self._latency = Tally()
        self._durations = Tally()
        self._sequence = marks.sequence or ""
        frames = marks.frames
        self._frame_fields = attrgetter(
            *((frames.sequence, frames.clock, frames.flags) if frames else ("", "", ""))
        )
        self._read_types = frozenset(
            [m.type for m in (*marks.turn_end, *marks.turn_output)]
            + [o.type for o in marks.tool_outcomes]
            + [marks.tool_call.type]
            + [m.type for m in (marks.resume, marks.loss_report) if m is not None]
        )
        """The message types the marks name: any other type means nothing more."""
        self._marked = self._read_types - {
            m.type
            for m in marks.turn_output
            if m.type not in {x.type for x in marks.turn_end}
            and m.type != marks.tool_call.type
            and m.type not in {o.type for o in marks.tool_outcomes}
            and m.type not in {x.type for x in (marks.resume, marks.loss_report) if x}
        }
        """The types that mean something whatever the state; the rest of ``_read_types`` (the
        outputs that answer a turn) only while a turn waits for its answer."""

    @classmethod
    def of(cls, protocol: str, *, own: str | None = None) -> SessionStats:
        """The statistics of a session of ``protocol`` (``brisvox``, ``ovp``), fed by the side
        ``own`` (see the class) or by a recording of both sides (None)."""
        try:
            module = import_module(f"voxwire.{protocol}.statistics")
        except ModuleNotFoundError:
            raise StatsError(f"no statistics for protocol {protocol!r}") from None
        marks: Marks = module.STATISTICS
        return cls(marks, own=own)

    # -- inputs -----------------------------------------------------------------------------
    # on_message and on_frame run for every message and frame of a live session: each input's
    # work is inline, and an input in the same bucket of the plot series as the one before
    # finds its cell without a look-up (docs/observability.md, Feeding the statistics live).

    def on_message(self, sender: str, message: Any, t: float, *, size: int) -> None:
        """``sender``'s ``message`` (decoded), ``size`` bytes on the wire, passed at ``t``."""
        side = self._sides.get(sender)
        if side is None:
            side = self._side(sender)
        state = self._state
        try:
            us = round(t * _US)  # NaN, infinities and what is no number raise
        except (TypeError, ValueError, OverflowError):
            raise _bad_time(t) from None
        if us > state.last:
            state.last = us
            if state.first is None:
                state.first = us
        side.messages += 1
        side.message_bytes += size
        if side.cell_from <= us < side.cell_to:
            side.cell.messages += 1  # type: ignore[union-attr]  # set with cell_to
        else:
            self._series.cell(side, us).messages += 1
        if state.replaying is not None and sender != state.replaying[0]:
            self._replayed(message)
        if side.sequenced:
            seq, last = getattr(message, self._sequence), side.seq
            if last is not None:
                if seq <= last:
                    side.seq_repeats += 1
                    return
                if seq > last + 1:
                    side.seq_gaps += 1
                    side.seq_missing += seq - last - 1
            side.seq = seq
        kind = message.type
        if (
            kind in self._marked
            or state.first_after_resume
            or (state.pending is not None and kind in self._read_types)
        ):
            self._read(sender, message, us)

    def on_frame(self, sender: str, frame: Any, t: float) -> None:
        """``sender``'s audio ``frame`` (decoded), passed at ``t``."""
        side = self._sides.get(sender)
        if side is None:
            side = self._side(sender)
        us = self._time(t)
        marks = self._marks.frames
        if marks is None:
            raise StatsError(f"{self._marks.protocol} carries no audio frames")
        side.frames += 1
        seq, clock, flags = self._frame_fields(frame)
        if flags & marks.silence_mask:
            side.silent_frames += 1
        if side.cell_from <= us < side.cell_to:
            cell = side.cell
            assert cell is not None
        else:
            cell = self._series.cell(side, us)
        cell.frames += 1
        last_seq = side.frame_seq
        if last_seq is None:
            side.frame_seq = seq
        else:
            ahead = (seq - last_seq) % marks.sequence_modulus
            if ahead == 0 or ahead >= marks.sequence_modulus >> 1:
                side.frames_late += 1
            else:
                side.frame_seq = seq
                if ahead > 1:
                    side.frame_gaps += 1
                    side.frames_missing += ahead - 1
                    cell.missing += ahead - 1
        previous = side.previous
        side.previous = (us, clock, seq)
        if previous is None:
            return
        # RFC 3550 (6.4.1, A.8): J += (|D| - J) / 16 with D = (Rj - Ri) - (Sj - Si), in
        # integers: J kept times 16, D in microseconds times the media clock units per frame.
        before, before_clock, before_seq = previous
        units = side.units
        if units is None:
            if (seq - before_seq) % marks.sequence_modulus != 1:
                return
            step = (clock - before_clock) % marks.clock_modulus
            if not 0 < step < marks.clock_modulus >> 1:
                return
            units = side.units = step
        half = marks.clock_modulus >> 1
        clock_step = (clock - before_clock + half) % marks.clock_modulus - half
        d = (us - before) * units - clock_step * marks.duration_ms * 1000
        jitter16 = side.jitter16 = side.jitter16 + abs(d) - ((side.jitter16 + 8) >> 4)
        if jitter16 > side.jitter16_max:
            side.jitter16_max = jitter16
        if jitter16 > cell.jitter16:
            cell.jitter16 = jitter16
        side.jittered = True

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
        if self.listener is not None:
            self.listener.link(event, us / _US)
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

    def audio(self, sender: str) -> tuple[int, int, float | None]:
        """``sender``'s audio frames so far, those missing, and the jitter in ms (None before
        two frames compare): what a snapshot says of them, without making one."""
        side = self._side(sender)
        jitter = side.jitter16 / (16_000 * (side.units or 1)) if side.jittered else None
        return side.frames, side.frames_missing, jitter

    @property
    def own(self) -> str | None:
        """The sender this side is (see the class), or None."""
        return self._own

    def snapshot(self, *, detail: bool = True) -> Snapshot:
        """Everything counted so far, frozen; without ``detail``, no plot series and no lists
        of turns, tool calls and resumes (their counts are there: what metrics read)."""
        state, marks = self._state, self._marks
        frames_ms = marks.frames.duration_ms if marks.frames is not None else 0
        directions = {
            s: self._direction(s, side, frames_ms, detail) for s, side in self._sides.items()
        }
        return Snapshot(
            protocol=marks.protocol,
            started_at=None if state.first is None else state.first / _US,
            last_at=None if state.first is None else state.last / _US,
            directions=MappingProxyType(directions),
            links=state.links,
            link_losses=state.link_losses,
            turns=state.turn_count,
            turns_answered=state.answered,
            turn_latency=self._latency.frozen(),
            turn_list=tuple(
                Turn(x.ended_at / _US, None if x.answered_at is None else x.answered_at / _US)
                for x in (state.turns if detail else ())
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
                for c in (state.calls if detail else ())
            ),
            resumes=state.resume_count,
            resume_list=tuple(
                Resume(
                    None if r.lost_at is None else r.lost_at / _US,
                    r.resumed_at / _US,
                    r.replayed,
                    r.events_lost,
                )
                for r in (state.resumes if detail else ())
            ),
            events_replayed=state.events_replayed,
            events_lost=state.events_lost,
        )

    # -- the rest ---------------------------------------------------------------------------

    def _side(self, sender: str) -> Side:
        side = self._sides.get(sender)
        if side is None:
            raise StatsError(f"sender must be one of {self._marks.senders}, not {sender!r}")
        return side

    def _time(self, t: float) -> int:
        try:
            us = round(t * _US)  # NaN, infinities and what is no number raise
        except (TypeError, ValueError, OverflowError):
            raise _bad_time(t) from None
        state = self._state
        if us > state.last:
            state.last = us
            if state.first is None:
                state.first = us
        return us

    def _direction(self, sender: str, side: Side, frame_ms: int, detail: bool) -> Direction:
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
            series=self._series.points(side) if detail else (),
        )

    def _read(self, sender: str, message: Any, us: int) -> None:
        """What a message in its place (no repeat) means for turns, tools, resumes and loss."""
        marks, state = self._marks, self._state
        kind = message.type
        if state.first_after_resume:
            self._first_after_resume(sender, message)
        if kind not in self._read_types:
            return
        if any(mark.matches(message) for mark in marks.turn_end):
            self._turn_ended(us)
        elif state.pending is not None and any(m.matches(message) for m in marks.turn_output):
            self._latency.add(us - state.pending.ended_at)
            state.answered += 1
            state.pending.answered_at = us
            if self.listener is not None:
                self.listener.turn_answered(state.pending.ended_at / _US, us / _US)
            state.pending = None
        if kind == marks.tool_call.type:
            self._call(message, us)
        else:
            self._outcome(message, us)
        if marks.resume is not None and marks.resume.matches(message):
            self._resumed(sender, message, us)
        elif marks.loss_report is not None and kind == marks.loss_report.type:
            state.events_lost += getattr(message, marks.loss_report.count)

    def _first_after_resume(self, sender: str, message: Any) -> None:
        """A message of a sender not heard since the last resume: its loss report is the
        resume's."""
        state, loss = self._state, self._marks.loss_report
        if sender in state.heard:
            return
        state.heard.add(sender)
        state.first_after_resume = len(state.heard) < len(self._sides)
        if loss is not None and message.type == loss.type and state.resume is not None:
            state.resume.events_lost += getattr(message, loss.count)

    def _turn_ended(self, us: int) -> None:
        state = self._state
        state.turn_count += 1
        state.pending = _Turn(us)
        if len(state.turns) < MAX_LISTED:
            state.turns.append(state.pending)
        if self.listener is not None:
            self.listener.turn_ended(us / _US)

    def _call(self, message: Any, us: int) -> None:
        marks, state = self._marks.tool_call, self._state
        state.call_count += 1
        if len(state.open_calls) >= MAX_OPEN_TOOL_CALLS:
            return
        call = _Call(getattr(message, marks.key), str(getattr(message, marks.name)), us)
        state.open_calls[call.key] = call
        if self.listener is not None:
            self.listener.tool_started(str(call.key), call.name, us / _US)
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
                if self.listener is not None:
                    self.listener.tool_ended(
                        str(call.key), mark.outcome, call.started_at / _US, us / _US
                    )
                return

    def _resumed(self, sender: str, message: Any, us: int) -> None:
        state, mark = self._state, self._marks.resume
        assert mark is not None
        state.resume_count += 1
        resume = _Resume(state.lost_at, us)
        if self.listener is not None:
            self.listener.resumed(None if state.lost_at is None else state.lost_at / _US, us / _US)
        state.lost_at = None
        if len(state.resumes) < MAX_LISTED:
            state.resumes.append(resume)
        state.resume, state.heard, state.first_after_resume = resume, set(), True
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
