"""What both Brisvox cores share: the outputs neither side owns, the bounded event buffer, and
the one way a refusal's text is cut to fit a reply.

The agent side's core is :mod:`voxwire.brisvox.agent_core`, the engine side's
:mod:`voxwire.brisvox.engine_core`; each returns these beside its own events.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from voxwire.brisvox.constants import MAX_REFUSAL_BYTES
from voxwire.brisvox.errors import ProtocolError
from voxwire.brisvox.messages import SessionReject
from voxwire.errors import VoxwireError

__all__ = [
    "BadMessage",
    "CommandFailed",
    "EventBuffer",
    "EventsDropped",
    "HandshakeFailed",
    "refusal_text",
]


@dataclass(frozen=True, slots=True)
class HandshakeFailed:
    """The handshake did not succeed; the link is (being) closed.

    ``final`` is false on the engine side when another reconnection attempt follows.
    """

    reason: str
    rejected: SessionReject | None = None
    final: bool = True


@dataclass(frozen=True, slots=True)
class BadMessage:
    """The peer sent something that breaks the protocol; ``answered`` says if the core replied."""

    error: ProtocolError
    answered: bool


class CommandFailed(VoxwireError):
    """A command answered ``ok: false``; ``code`` is the protocol's code.

    The agent side raises it when the engine refused a command; an engine-side handler
    (``EngineLink.on("transfer", ...)``) raises it to refuse one.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def refusal_text(error: ProtocolError) -> str:
    """``error`` as the ``"<code>: <text>"`` a refusal carries, cut to ``MAX_REFUSAL_BYTES``
    UTF-8 bytes, so the reply always fits: the text may quote a rejected value, and a lone
    surrogate in it (a ``\\ud800`` escape in the input) becomes ``?``."""
    text = "".join("?" if "\ud800" <= c <= "\udfff" else c for c in str(error))
    data = text.encode()
    if len(data) <= MAX_REFUSAL_BYTES:
        return text
    return data[: MAX_REFUSAL_BYTES - 3].decode("utf-8", "ignore") + "..."


# -- the bounded event buffer -------------------------------------------------------------------

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EventsDropped:
    """``count`` events were dropped by a full buffer; delivered where the gap is."""

    count: int


class EventBuffer(Generic[T]):
    """A bounded FIFO that drops the newest item when full and reports the gap, never a stall.

    The count of dropped items comes out of :meth:`pop` as :class:`EventsDropped`, once the items
    queued before the first drop are out (where the gap is). A final item (the call's end) is
    never dropped and comes out last; nothing is accepted after it.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"an event buffer holds at least 1 item, not {capacity}")
        self.capacity = capacity
        self._items: deque[T] = deque()
        self._pushed = 0
        self._popped = 0
        self._lost = 0
        self._gap_after = 0
        self._final: T | None = None
        self._final_done = False
        self.lost_total = 0
        """Items dropped over the buffer's life."""

    def __len__(self) -> int:
        """Items waiting (not the final one)."""
        return len(self._items)

    @property
    def finished(self) -> bool:
        """Whether the final item was pushed."""
        return self._final is not None

    def push(self, item: T) -> bool:
        """Queue ``item``; return False when it was dropped (full, counted) or after the end."""
        if self._final is not None:
            return False
        if len(self._items) >= self.capacity:
            if self._lost == 0:
                self._gap_after = self._pushed
            self._lost += 1
            self.lost_total += 1
            return False
        self._items.append(item)
        self._pushed += 1
        return True

    def finish(self, item: T) -> None:
        """Queue the final item (once): delivered after everything queued before it."""
        if self._final is None:
            self._final = item

    def pop(self) -> T | EventsDropped | None:
        """The next item, an :class:`EventsDropped` where a gap is, or None when empty."""
        if self._lost and self._popped >= self._gap_after:
            lost, self._lost = self._lost, 0
            return EventsDropped(lost)
        if self._items:
            self._popped += 1
            return self._items.popleft()
        if self._final is not None and not self._final_done:
            self._final_done = True
            return self._final
        return None
