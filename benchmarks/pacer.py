"""One timer task for every paced audio sender on a clock, instead of a sleep per sender: how
``--pacer shared`` paces the call load generator (no runtime sender uses it: the OVP client's
``stream_audio`` paces its one stream itself and restarts its schedule after a stall instead of
making missed frames up).

Real-time audio goes out one frame per period (20 ms). With a task per sender, 300 calls resume
300 tasks every tick; a :class:`Pacer` resumes one task, which calls every registered sender in
turn (a plain function: it queues its frames on its link, which writes them when the loop turn
ends). Ticks sit on a fixed grid (``origin + k * period``), so nobody drifts, and each sender is
told how many frames are due since its last call, so one that joined late or a tick the loop
missed is made up at once.

```python
import asyncio

from benchmarks.pacer import Pacer

async def main() -> None:
    pacer = Pacer(0.02)
    sent: list[int] = []

    def send(due: int) -> bool:                 # one frame per tick due; False: done
        sent.extend([1] * due)
        return len(sent) < 5

    pacer.add(send)
    await pacer.idle()                          # every sender is done
    assert len(sent) == 5

asyncio.run(main())
```
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from voxwire.clock import SYSTEM_CLOCK, Clock

__all__ = ["Pacer", "Sender"]

Sender = Callable[[int], bool]
"""Called at each tick with the number of frames due since its last call (1 unless ticks were
missed); returns False to leave the pacer."""


class Pacer:
    """Ticks every ``period`` clock seconds while it has senders, calling each of them.

    The timer task runs only while a sender is registered. A sender that raises is removed and
    its exception is re-raised by :meth:`idle`.
    """

    def __init__(self, period: float, clock: Clock = SYSTEM_CLOCK) -> None:
        if not period > 0:
            raise ValueError(f"a pacer's period must be positive, not {period}")
        self.period = period
        self.clock = clock
        self.origin = clock.now()
        self.wakeups = 0
        """Ticks fired so far (one loop wakeup each, whatever the number of senders)."""
        self._senders: dict[Sender, int] = {}  # sender -> the tick it was last called for
        self._fired = -1
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None

    def index(self, now: float) -> int:
        """The number of the last tick at or before ``now``."""
        return math.floor((now - self.origin) / self.period)

    def add(self, sender: Sender) -> None:
        """Call ``sender`` from the next tick on, until it returns False or is removed."""
        self._senders.setdefault(sender, max(self._fired, self.index(self.clock.now())))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="pacer")

    def remove(self, sender: Sender) -> None:
        """Stop calling ``sender`` (nothing if it is not registered)."""
        self._senders.pop(sender, None)

    def __contains__(self, sender: Sender) -> bool:
        return sender in self._senders

    async def idle(self) -> None:
        """Wait until no sender is left; re-raise the first exception a sender raised."""
        if self._task is not None:
            await asyncio.shield(self._task)
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    async def _run(self) -> None:
        clock, senders = self.clock, self._senders
        while senders:
            due = max(self._fired, self.index(clock.now())) + 1
            await clock.sleep(self.origin + due * self.period - clock.now())
            self._fired = max(due, self.index(clock.now()))  # a timer may fire a little early
            self.wakeups += 1
            for sender, last in list(senders.items()):
                if sender not in senders:
                    continue  # removed by an earlier sender of this tick
                senders[sender] = self._fired
                try:
                    keep = sender(self._fired - last)
                except Exception as exc:
                    keep = False
                    self._failure = self._failure or exc
                if not keep:
                    senders.pop(sender, None)
