"""The one timer of every role's session: a loop timer at a core's next deadline, on the
injectable clock (:mod:`voxwire.clock`), with no task of its own.

```text
timer = DeadlineTimer(clock, core.next_deadline, lambda now: perform(core.tick(now)))
timer.update()      # after every input that may have moved the deadline sooner
timer.cancel()      # the session is over
```
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from voxwire.clock import Clock

__all__ = ["DeadlineTimer"]


class DeadlineTimer:
    """Calls ``fire(now)`` once ``next_deadline()`` has passed, then sets itself again.

    :meth:`update` sets the loop timer for the deadline when it is sooner than the one set (a
    deadline that moved later lets the timer fire early, find nothing due and set itself for
    the new one). ``fire`` gets the clock's time; it usually ticks the core and performs what
    the tick returned.
    """

    __slots__ = ("_at", "_clock", "_fire", "_handle", "_next_deadline")

    def __init__(
        self,
        clock: Clock,
        next_deadline: Callable[[], float | None],
        fire: Callable[[float], None],
    ) -> None:
        self._clock = clock
        self._next_deadline = next_deadline
        self._fire = fire
        self._handle: asyncio.TimerHandle | None = None
        self._at = math.inf

    @property
    def at(self) -> float | None:
        """The deadline the timer is set for, or None."""
        return None if self._handle is None else self._at

    def update(self) -> None:
        """Set the timer for the next deadline, if there is one sooner than the one set."""
        deadline = self._next_deadline()
        if deadline is None or deadline >= self._at:
            return
        if self._handle is not None:
            self._handle.cancel()
        clock = self._clock
        delay = clock.real_seconds(max(0.0, deadline - clock.now()))
        self._handle = asyncio.get_running_loop().call_later(delay, self._due)
        self._at = deadline

    def cancel(self) -> None:
        """Stop: nothing fires until the next :meth:`update`."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle, self._at = None, math.inf

    def _due(self) -> None:
        self._handle, self._at = None, math.inf
        deadline, now = self._next_deadline(), self._clock.now()
        if deadline is not None and deadline <= now:
            self._fire(now)
        self.update()
