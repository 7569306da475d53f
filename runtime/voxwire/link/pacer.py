"""One timer for every paced audio sender on a clock, instead of one sleep per sender per frame.

Real-time audio goes out one frame per period (20 ms). With a sleep per sender, 300 calls wake
the loop 15,000 times a second; a :class:`Pacer` wakes it 50 times and every sender waiting on
it goes on in that wakeup. Ticks sit on a fixed grid (``origin + k * period``), so no sender
drifts; :meth:`Pacer.tick` returns the tick's number so that a sender that missed ticks (a busy
loop) sends what it owes and stays in real time.

```text
pacer = Pacer(ovp.FRAME_MS / 1000, clock)         # one per loop, shared by every call
sent = await pacer.tick()                         # the first tick
while frames:
    due = await pacer.tick()
    for _ in range(due - sent):                   # one frame per tick, missed ones too
        send(frames.popleft())
    sent = due
```
"""

from __future__ import annotations

import asyncio
import math

from voxwire.clock import SYSTEM_CLOCK, Clock

__all__ = ["Pacer"]


class Pacer:
    """Ticks every ``period`` clock seconds while someone waits; shared by any number of senders.

    The timer task runs only while a sender waits on :meth:`tick`, and stops by itself after a
    tick nobody waited for.
    """

    def __init__(self, period: float, clock: Clock = SYSTEM_CLOCK) -> None:
        if not period > 0:
            raise ValueError(f"a pacer's period must be positive, not {period}")
        self.period = period
        self.clock = clock
        self.origin = clock.now()
        self.wakeups = 0
        """Ticks fired so far (one loop wakeup each, whatever the number of senders)."""
        self._fired = -1  # the number of the last tick fired
        self._next: asyncio.Future[int] | None = None
        self._task: asyncio.Task[None] | None = None

    def index(self, now: float) -> int:
        """The number of the last tick at or before ``now``."""
        return math.floor((now - self.origin) / self.period)

    async def tick(self) -> int:
        """Wait for the next tick and return its number."""
        if self._next is None or self._next.done():
            self._next = asyncio.get_running_loop().create_future()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="pacer")
        return await asyncio.shield(self._next)

    async def _run(self) -> None:
        clock = self.clock
        while True:
            due = max(self._fired, self.index(clock.now())) + 1
            await clock.sleep(self.origin + due * self.period - clock.now())
            future, self._next = self._next, None
            if future is None:
                return  # a tick nobody waited for: stop until a sender comes back
            self.wakeups += 1
            self._fired = max(due, self.index(clock.now()))  # a timer may fire a little early
            if not future.done():
                future.set_result(self._fired)
