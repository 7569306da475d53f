"""Bounding a timer from above on a loaded machine: how late the event loop ran what was due.

A timer fires late by as long as its process was not scheduled or its loop was busy, and a
``ScaledClock`` multiplies that lateness by its factor. A test that bounds a timer from above
allows what :class:`Lateness` measured while the timer ran, instead of a fixed margin (too wide
on an idle machine to catch a late timer, too narrow on a busy one). A lower bound (never early)
allows nothing. A bound on a whole run's real time (a load test's pace) allows instead what
:func:`waited` measured: the time the process was ready to run and waited for a CPU.

```python
async with Lateness() as late:
    start = time.monotonic()
    ...  # the timer under test fires at `fired`
    assert timeout <= fired - start <= timeout + late.allowance(start, fired)
```
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import TracebackType

__all__ = ["STEP", "Lateness", "waited"]

STEP = 0.005
"""Seconds between the probe's wake-ups: a stall shorter than this may go unmeasured."""


class Lateness:
    """A probe task that sleeps :data:`STEP` at a time in the running loop, noting each span
    (``time.monotonic``) in which it was due and had not run yet."""

    def __init__(self) -> None:
        self._spans: list[tuple[float, float]] = []
        self._due: float | None = None
        self._probe: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Lateness:
        self._probe = asyncio.create_task(self._run(), name="lateness probe")
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._probe is not None
        self._probe.cancel()
        await asyncio.gather(self._probe, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            self._due = time.monotonic() + STEP
            await asyncio.sleep(STEP)
            woke = time.monotonic()
            if woke > self._due:
                self._spans.append((self._due, woke))

    def overdue(self, start: float, end: float) -> float:
        """Seconds of [``start``, ``end``] in which the loop ran late (the probe was overdue)."""
        spans, now = list(self._spans), time.monotonic()
        if self._due is not None and now > self._due:
            spans.append((self._due, now))  # overdue now, and not run yet
        return sum(max(0.0, min(woke, end) - max(due, start)) for due, woke in spans)

    def allowance(self, start: float, end: float, *, hops: int = 1) -> float:
        """How much later than due something that took ``hops`` wake-ups of the loop (a timer,
        a task it wakes, ...) may have finished in [``start``, ``end``]: the time the loop ran
        late, and for each hop one step (a stall may begin just after the probe ran)."""
        return self.overdue(start, end) + hops * STEP


def waited(pid: int | None = None) -> float:
    """Seconds the main thread of this process (or of ``pid``) has waited for a CPU while ready
    to run, since it started: the kernel's run delay, which only a loaded machine makes long."""
    stat = Path("/proc", str(pid) if pid is not None else "self", "schedstat")
    return int(stat.read_text(encoding="ascii").split()[1]) / 1e9
