"""The one inbox of every role: a bounded queue from the session's reader to its application
that never makes the reader wait.

```python
import asyncio

from voxwire.brisvox.outputs import EventsDropped
from voxwire.session import Inbox


async def main() -> None:
    inbox: Inbox[str | EventsDropped] = Inbox(2, gap=EventsDropped)
    for word in ("a", "b", "c", "d"):  # c and d find it full: dropped, counted
        inbox.put(word)
    inbox.put_always("e")  # past the bound: what must not be lost
    inbox.close("end")  # the last item
    assert [item async for item in inbox] == ["a", "b", EventsDropped(2), "e", "end"]
    assert inbox.lost == 2


asyncio.run(main())
```
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Inbox"]

T = TypeVar("T")


class _Gap:
    """Where items were dropped, in the queue: how many so far."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class Inbox(Generic[T]):
    """A bounded FIFO from the reader to the application; iterate it (``async for``).

    An item that finds it full (or closed) is dropped and counted in :attr:`lost`, never a
    stall. With ``gap``, the drops also come out of the iteration where they happened, once:
    ``gap(count)`` after the items queued before the first of them. :meth:`close` ends it once
    what it holds is taken (its ``final`` item last). Each waiting consumer waits on a future of
    its own (no ``asyncio.Event``, which looks its loop up on every wait): an item wakes the
    application for the price of that future.

    Args:
        maxsize: The bound (at least 1).
        gap: Builds the item that reports ``count`` dropped items (Brisvox ``EventsDropped``);
            None: drops are only counted.
        before_wait: Called each time the consumer is about to wait (the OVP gateway writes
            what its application sent meanwhile).
        at_end: Called when the iteration ends: the exception to raise instead of
            ``StopAsyncIteration`` (a session that failed), or None.
    """

    def __init__(
        self,
        maxsize: int,
        *,
        gap: Callable[[int], T] | None = None,
        before_wait: Callable[[], None] | None = None,
        at_end: Callable[[], BaseException | None] | None = None,
    ) -> None:
        if maxsize < 1:
            raise ValueError(f"an inbox holds at least 1 item, not {maxsize}")
        self.maxsize = maxsize
        self.lost = 0
        """Items dropped over the inbox's life."""
        self.closed = False
        self._items: deque[T] = deque()
        self._limit = maxsize  # one more while a gap's mark is queued: it holds no item
        self._gap = gap
        self._mark: Any = None  # the _Gap queued and not yet taken
        self._waiters: list[asyncio.Future[None]] = []
        self._before_wait = before_wait
        self._at_end = at_end

    def put(self, item: T) -> bool:
        """Add ``item``; False (and counted in ``lost``) when the inbox is full or closed."""
        items = self._items
        if self.closed or len(items) >= self._limit:
            return self._drop()
        items.append(item)
        if self._waiters:
            self._wake()
        return True

    def put_always(self, item: T) -> None:
        """Add ``item`` even past the bound (what must not be lost: a change of the link; it
        takes room from what :meth:`put` adds until it is taken); nothing after :meth:`close`."""
        if not self.closed:
            self._items.append(item)
            if self._waiters:
                self._wake()

    def close(self, final: T | None = None) -> None:
        """No more items (once): ``final``, if given, comes out after what is queued, then the
        iteration ends."""
        if self.closed:
            return
        if final is not None:
            self._items.append(final)
        self.closed = True
        self._wake()

    def __len__(self) -> int:
        """Items waiting to be taken."""
        return len(self._items)

    def __aiter__(self) -> Inbox[T]:
        return self

    async def __anext__(self) -> T:
        """The oldest item; at the end ``StopAsyncIteration`` (or what ``at_end`` gives)."""
        items = self._items
        while not items:
            if self.closed:
                error = None if self._at_end is None else self._at_end()
                raise error or StopAsyncIteration
            if self._before_wait is not None:
                self._before_wait()
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:  # cancelled before any put woke it
                    self._waiters.remove(waiter)
        item = items.popleft()
        if item is self._mark:
            return self._gap_taken()
        return item

    async def get(self) -> T | None:
        """The oldest item, or None once the inbox is closed and empty."""
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            return None

    def _drop(self) -> bool:
        self.lost += 1
        if self._gap is not None and not self.closed:
            if self._mark is None:
                self._mark = _Gap()
                self._items.append(self._mark)
                self._limit += 1
            self._mark.count += 1
        return False

    def _gap_taken(self) -> T:
        mark, self._mark = self._mark, None
        self._limit -= 1
        assert self._gap is not None
        return self._gap(mark.count)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
