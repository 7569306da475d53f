"""The sans-I/O outbound queue of one connection: two classes, bounds, close ordering.

Every message a role writes goes through one :class:`Outbound`, already encoded (so checked) by
the caller. Two classes:

- **control** (handshake answers, tool calls and results, command results, errors, the end):
  never dropped. With ``control_first`` they go before queued events (a tool call is never
  stuck behind text deltas); otherwise everything goes in the order it was queued. A control
  queue past ``control_bound`` means the peer stopped reading: :data:`Put.OVERFLOWED`, and the
  link must go down.
- **events**: at most ``event_bound`` wait. Past it, :data:`Overflow.DROP` drops the newest and
  counts them (reported through ``report_lost`` where the gap is, e.g. Brisvox ``events.lost``);
  :data:`Overflow.WAIT` refuses with :data:`Put.FULL` so the producer waits for room, or hands
  a whole stream to :meth:`Outbound.feed`, which enters the queue as it drains.

:meth:`Outbound.take` hands the writer everything queued in one batch; a :meth:`Outbound.close`
goes out after everything queued before it. No asyncio, no socket, no clock: ``now`` is passed.

```python
from voxwire.link import Outbound, Overflow, Put
from voxwire.sansio import SendText

queue = Outbound(event_bound=2, overflow=Overflow.DROP)
assert queue.event(SendText(b'{"n":1}')) is Put.QUEUED
assert queue.event(SendText(b'{"n":2}')) is Put.QUEUED
assert queue.event(SendText(b'{"n":3}')) is Put.DROPPED     # full: dropped and counted
assert queue.control(SendText(b'{"answer":1}')) is Put.QUEUED
queue.close(1000, "bye")
batch = queue.take(now=0.0)
assert [f.data for f in batch.frames] == [b'{"answer":1}', b'{"n":1}', b'{"n":2}']
assert batch.close is not None and queue.lost_total == 1
```
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from enum import Enum
from typing import Final

import msgspec

from voxwire.sansio import Close, SendBinary, SendText

__all__ = [
    "TRANSITIONS",
    "Batch",
    "Frame",
    "Outbound",
    "OutboundEvent",
    "OutboundState",
    "Overflow",
    "Put",
]

Frame = SendText | SendBinary
"""One encoded message the writer writes as it is."""


class OutboundState(Enum):
    """Where one connection's outbound side is."""

    OPEN = "open"
    """Messages are accepted and written."""
    CLOSING = "closing"
    """A close is queued: nothing more is accepted; what was queued goes out, then the close."""
    CLOSED = "closed"
    """The close was handed to the writer."""
    DOWN = "down"
    """The link failed (a write, the drain timeout, silence, an overflow): nothing more is
    written and what was queued is dropped."""


class OutboundEvent(Enum):
    """What moves an :class:`Outbound` from one state to another."""

    CLOSE_QUEUED = "close queued"
    CLOSE_TAKEN = "close taken"
    FAILED = "failed"


TRANSITIONS: Final[Mapping[tuple[OutboundState, OutboundEvent], OutboundState]] = {
    (OutboundState.OPEN, OutboundEvent.CLOSE_QUEUED): OutboundState.CLOSING,
    (OutboundState.OPEN, OutboundEvent.FAILED): OutboundState.DOWN,
    (OutboundState.CLOSING, OutboundEvent.CLOSE_QUEUED): OutboundState.CLOSING,
    (OutboundState.CLOSING, OutboundEvent.CLOSE_TAKEN): OutboundState.CLOSED,
    (OutboundState.CLOSING, OutboundEvent.FAILED): OutboundState.DOWN,
    (OutboundState.CLOSED, OutboundEvent.CLOSE_QUEUED): OutboundState.CLOSED,
    (OutboundState.CLOSED, OutboundEvent.FAILED): OutboundState.CLOSED,
    (OutboundState.DOWN, OutboundEvent.CLOSE_QUEUED): OutboundState.DOWN,
    (OutboundState.DOWN, OutboundEvent.FAILED): OutboundState.DOWN,
}
"""Every allowed (state, event) pair and the state it leads to; any other pair is a bug."""


class Overflow(Enum):
    """What a full event class does with one more event."""

    DROP = "drop"
    """Drop the newest and count it (the protocol allows loss: Brisvox events)."""
    WAIT = "wait"
    """Refuse it (:data:`Put.FULL`); the producer waits for room (OVP's replayable events)."""


class Put(Enum):
    """What became of one message handed to the queue."""

    QUEUED = "queued"
    DROPPED = "dropped"
    """An event over the bound under :data:`Overflow.DROP`: counted in ``lost``."""
    FULL = "full"
    """An event over the bound under :data:`Overflow.WAIT`: not queued, put it again later."""
    OVERFLOWED = "overflowed"
    """Control over ``control_bound``: the peer is not reading; the queue is down now."""
    CLOSED = "closed"
    """The queue is closing, closed or down: nothing more is written."""


# The members the hot paths test, bound once: an Enum member look-up is a call on Python 3.11.
_OPEN: Final = OutboundState.OPEN
_CLOSED: Final = OutboundState.CLOSED
_DOWN: Final = OutboundState.DOWN
_QUEUED: Final = Put.QUEUED


class Batch(msgspec.Struct, frozen=True):
    """What the writer writes in one drain: the frames in order, then the close if any."""

    frames: list[Frame] = msgspec.field(default_factory=list)
    close: Close | None = None

    def __bool__(self) -> bool:
        return bool(self.frames) or self.close is not None


class Outbound:
    """One connection's outbound queue.

    Args:
        event_bound: Most events waiting at once (at least 1).
        overflow: What one more event does when ``event_bound`` are waiting.
        control_bound: Most control messages waiting at once; past it the queue goes down.
        control_first: Control goes before queued events; False keeps the queued order (a
            protocol whose sequence numbers are assigned when a message is queued).
        report_lost: The frame that reports ``count`` dropped events, written where the gap is
            (after the events queued before the first drop). None: they are only counted.
        stamp: Called with each text frame and ``now`` as the writer takes it (a protocol that
            numbers messages in write order); it works on bytes and must not fail.
    """

    def __init__(
        self,
        *,
        event_bound: int,
        overflow: Overflow,
        control_bound: int | None = None,
        control_first: bool = True,
        report_lost: Callable[[int], Frame] | None = None,
        stamp: Callable[[SendText, float], SendText] | None = None,
    ) -> None:
        if event_bound < 1:
            raise ValueError(f"an outbound queue holds at least 1 event, not {event_bound}")
        self.event_bound = event_bound
        self.overflow = overflow
        self.control_bound = control_bound if control_bound is not None else 4 * event_bound
        if self.control_bound < 1:
            raise ValueError(f"control_bound must be at least 1, not {self.control_bound}")
        self.control_first = control_first
        self.state = OutboundState.OPEN
        self.lost = 0
        """Events dropped and not reported yet."""
        self.lost_total = 0
        """Events dropped over the queue's life."""
        self._report_lost = report_lost
        self._stamp = stamp
        self._control: deque[Frame] = deque()
        self._events: deque[Frame] = deque()
        self._event_count = 0  # events in _events (control may sit there too: not control_first)
        self._control_count = 0
        self._feeds: deque[Iterator[Frame]] = deque()
        self._close: Close | None = None
        self._final: list[Frame] = []

    # -- state ----------------------------------------------------------------------------------

    def _move(self, event: OutboundEvent) -> None:
        try:
            self.state = TRANSITIONS[self.state, event]
        except KeyError:
            raise RuntimeError(f"outbound queue: {event.value} while {self.state.value}") from None

    @property
    def accepting(self) -> bool:
        """Whether messages are accepted (the queue is open)."""
        return self.state is _OPEN

    @property
    def room(self) -> int:
        """How many events may be queued now (0 while a feed is still entering)."""
        if self.state is not _OPEN or self._feeds:
            return 0
        return self.event_bound - self._event_count

    @property
    def pending(self) -> bool:
        """Whether :meth:`take` has something for the writer."""
        if self.state is _DOWN or self.state is _CLOSED:
            return False
        return bool(
            self._control or self._events or self.lost or self._close is not None or self._feeds
        )

    @property
    def waiting(self) -> int:
        """Messages waiting to be taken (both classes)."""
        return len(self._control) + len(self._events)

    # -- input ----------------------------------------------------------------------------------

    def control(self, frame: Frame) -> Put:
        """Queue a control message: never dropped."""
        if self.state is not _OPEN:
            return Put.CLOSED
        if self._control_count >= self.control_bound:
            self.fail()
            return Put.OVERFLOWED
        self._control_count += 1
        (self._control if self.control_first else self._events).append(frame)
        return _QUEUED

    def event(self, frame: Frame) -> Put:
        """Queue an event, within ``event_bound``."""
        if self.room <= 0:  # no room in a closed queue either: the common case asks once
            if not self.accepting:
                return Put.CLOSED
            if self.overflow is Overflow.WAIT:
                return Put.FULL
            self.lost += 1
            self.lost_total += 1
            return Put.DROPPED
        self._events.append(frame)
        self._event_count += 1
        return _QUEUED

    def feed(self, frames: Iterable[Frame]) -> Put:
        """Queue a stream of events that enters the queue as it drains (a replay), never more
        than ``event_bound`` at once, in order and before any event queued after it."""
        if not self.accepting:
            return Put.CLOSED
        self._feeds.append(iter(frames))
        self._refill()
        return Put.QUEUED

    def close(self, code: int, reason: str = "", final: Sequence[Frame] = ()) -> None:
        """Queue the close: ``final`` (e.g. the end message) and then the close go out after
        everything queued before; nothing is accepted after it."""
        if self.state is OutboundState.OPEN:
            self._close = Close(code, reason)
            self._final = list(final)
        self._move(OutboundEvent.CLOSE_QUEUED)

    def fail(self) -> None:
        """The link failed: drop what is queued and accept nothing more."""
        self._move(OutboundEvent.FAILED)
        if self.state is OutboundState.DOWN:
            self._control.clear()
            self._events.clear()
            self._feeds.clear()
            self._final = []
            self._close = None
            self._event_count = self._control_count = 0

    # -- output ---------------------------------------------------------------------------------

    def take(self, now: float) -> Batch:
        """Everything the writer writes now, in order: control (when ``control_first``), the
        events, the report of dropped ones, and once the close is due, ``final`` and the close."""
        if self.state is _DOWN or self.state is _CLOSED:
            return Batch()
        if self._control:
            frames: list[Frame] = [*self._control, *self._events]
            self._control.clear()
        else:
            frames = list(self._events)
        self._events.clear()
        self._event_count = self._control_count = 0
        if self.lost and self._report_lost is not None:
            frames.append(self._report_lost(self.lost))
        self.lost = 0
        if self._feeds:
            self._refill()
        close = None
        if self._close is not None and not self._feeds and not self._events:
            frames.extend(self._final)
            close, self._close, self._final = self._close, None, []
            self._move(OutboundEvent.CLOSE_TAKEN)
        if self._stamp is not None:
            stamp = self._stamp
            frames = [stamp(f, now) if isinstance(f, SendText) else f for f in frames]
        return Batch(frames, close)

    def _refill(self) -> None:
        while self._feeds and self._event_count < self.event_bound:
            frame = next(self._feeds[0], None)
            if frame is None:
                self._feeds.popleft()
                continue
            self._events.append(frame)
            self._event_count += 1
