"""The gateway's stream of server events to the connections of one session. Not public:
:mod:`voxwire.ovp.gateway_core` is.

Every server event the core stamps is kept in the :class:`ReplayBuffer` (bounded by count,
encoded bytes and age) and written to the current link through a cursor: at most ``window``
events are handed to the adapter unwritten (``ToLink(..., stream=True)``), and
:meth:`Stream.drained` hands out the next ones as the link's queue has room. A replay is the
same cursor set back to the resumed ``last_server_seq``, so neither a replay of 4096 events nor
a burst of events larger than the adapter's queue ever enters the queue at once. A link is cut
(closed, and nothing more goes to it) at once, or once the stream is written out. What the core
tells its adapter of its links is here too: a link dropped (:class:`LinkDropped`), a link that
resumed the session (:class:`Resumed`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import msgspec

from voxwire.ovp import (
    REPLAY_BUFFER_MAX_AGE_MS,
    REPLAY_BUFFER_MAX_BYTES,
    REPLAY_BUFFER_MAX_EVENTS,
    CloseCode,
    SessionResume,
)
from voxwire.ovp._session import Stamper
from voxwire.sansio import Action, Close, SendText

__all__ = ["Cursor", "LinkDropped", "ReplayBuffer", "Resumed", "Stream", "ToLink"]


class ToLink(msgspec.Struct, frozen=True):
    """Perform ``action`` on the gateway's connection ``link``.

    ``stream``: an event of the session's stream, which counts against the link's window (the
    adapter queues it as an event; anything else is control: audio, refusals, closes).
    """

    link: int
    action: Action
    stream: bool = False


@dataclass(frozen=True, slots=True)
class LinkDropped:
    """The session's current connection is gone; the resume window runs from ``at``."""

    link: int
    at: float


@dataclass(frozen=True, slots=True)
class Resumed:
    """``link`` resumed the session; ``replayed`` events are sent again before live ones.
    ``message``: the client's ``session.resume``."""

    link: int
    replayed: int
    message: SessionResume | None = field(default=None, compare=False)


class Cursor:
    """One authenticated connection: waiting for its session.resume, or carrying the stream."""

    def __init__(self) -> None:
        self.streaming = False  # the session's current link
        self.next_seq = 0  # the seq of the next event of the stream to hand out
        self.unwritten = 0  # events handed out that the link's queue may still hold
        self.close_after: Close | None = None  # once the stream is written out
        self.cut = False  # closed: nothing more goes to it


class ReplayBuffer:
    """The server events sent, for replay: bounded by count, encoded bytes and age.

    Seqs are consecutive (every stamped event enters), so a seq's place is ``seq - first``.
    """

    def __init__(self) -> None:
        self._events: deque[tuple[int, float, bytes]] = deque()
        self._bytes = 0
        self.evicted_through = -1  # highest seq no longer held

    def add(self, seq: int, data: bytes, now: float) -> None:
        self._events.append((seq, now, data))
        self._bytes += len(data)
        self.evict(now)

    def evict(self, now: float) -> None:
        events = self._events
        oldest = now - REPLAY_BUFFER_MAX_AGE_MS / 1000
        while events and (
            len(events) > REPLAY_BUFFER_MAX_EVENTS
            or self._bytes > REPLAY_BUFFER_MAX_BYTES
            or events[0][1] < oldest
        ):
            seq, _, data = events.popleft()
            self._bytes -= len(data)
            self.evicted_through = seq

    def holds_after(self, last_seq: int) -> bool:
        """Whether every event after ``last_seq`` is still held."""
        return last_seq >= self.evicted_through

    def take(self, first_seq: int, count: int) -> list[bytes]:
        """Up to ``count`` encoded events from ``first_seq`` on (which must be held)."""
        events = self._events
        if not events or count <= 0:
            return []
        start = first_seq - events[0][0]
        # By index: a deque finds one from its nearer end, so the live stream (the newest
        # events) costs the same with 4096 held as with one (islice would walk from the left).
        return [events[i][2] for i in range(start, min(start + count, len(events)))]

    def clear(self) -> None:
        self._events.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._events)

    @property
    def size(self) -> int:
        """Encoded bytes held."""
        return self._bytes


class Stream:
    """The stream of one session's server events to its links.

    Args:
        stamper: The session's stamper: its ``next_seq`` is where the stream's head is.
        window: Events of the stream one link's queue holds at most (its event bound).
    """

    def __init__(self, stamper: Stamper, window: int) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, not {window}")
        self.links: dict[int, Cursor] = {}
        """Every authenticated connection of the session, by link id."""
        self.replay = ReplayBuffer()
        self._stamper = stamper
        self._window = window
        self._next_link = 0

    def open(self) -> int:
        """A new connection's link id (it waits for its stream)."""
        link = self._next_link
        self._next_link += 1
        self.links[link] = Cursor()
        return link

    def follow(self, link: int, next_seq: int) -> None:
        """``link`` carries the stream from now on, going on from ``next_seq``."""
        cursor = self.links[link]
        cursor.streaming = True
        cursor.next_seq = next_seq

    def waiting(self) -> list[int]:
        """The links that wait for their session.resume."""
        return [link for link, cursor in self.links.items() if not cursor.streaming]

    def pump(self, link: int) -> list[ToLink]:
        """Hand ``link`` the next events of the stream its window allows (then a pending close)."""
        cursor = self.links.get(link)
        if cursor is None or cursor.cut or not cursor.streaming:
            return []
        out: list[ToLink] = []
        behind = self._stamper.next_seq - cursor.next_seq
        room = self._window - cursor.unwritten
        if behind > 0 and room > 0:
            if not self.replay.holds_after(cursor.next_seq - 1):
                return self.cut(link, Close(CloseCode.POLICY, "too slow: the stream was evicted"))
            chunk = self.replay.take(cursor.next_seq, min(behind, room))
            out = [ToLink(link, SendText(data), stream=True) for data in chunk]
            cursor.next_seq += len(chunk)
            cursor.unwritten += len(chunk)
        if cursor.close_after is not None and cursor.next_seq == self._stamper.next_seq:
            out += self.cut(link, cursor.close_after)
        return out

    def drained(self, link: int, room: int) -> list[ToLink]:
        """``link``'s queue drained and has ``room`` for events: the next part of the stream."""
        cursor = self.links.get(link)
        if cursor is None:
            return []
        cursor.unwritten = max(0, self._window - room)
        return self.pump(link)

    def close_after(self, link: int, close: Close) -> list[ToLink]:
        """Close ``link`` once the stream is written out to it."""
        self.links[link].close_after = close
        return self.pump(link)

    def cut(self, link: int, close: Close) -> list[ToLink]:
        """Close ``link`` now; it gets nothing more (the adapter reports it lost)."""
        cursor = self.links.get(link)
        if cursor is None or cursor.cut:
            return []
        cursor.cut = True
        return [ToLink(link, close)]

    def cut_all(self, close: Close) -> list[ToLink]:
        """Close every link now."""
        return [out for link in list(self.links) for out in self.cut(link, close)]
