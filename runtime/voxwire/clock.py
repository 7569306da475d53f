"""One injectable clock for every timer of the runtime, so tests can scale time.

The sans-I/O cores never read a clock: they are handed ``now`` (seconds, monotonic) with every
input. The asyncio adapters read it from a ``Clock`` and sleep on it, so a test that runs a
call with ``ScaledClock(50)`` sees a 30-second window pass in 0.6 seconds of real time.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "ScaledClock", "SystemClock"]


class Clock(Protocol):
    """Monotonic time in seconds, and a sleep that follows it."""

    def now(self) -> float:
        """Seconds since an arbitrary, fixed origin; never goes back."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait until ``seconds`` of this clock's time have passed."""
        ...

    def real_seconds(self, seconds: float) -> float:
        """How many real seconds ``seconds`` of this clock's time take (for socket timeouts)."""
        ...


class SystemClock:
    """Real time: ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def real_seconds(self, seconds: float) -> float:
        return seconds


class ScaledClock:
    """Time that runs ``factor`` times faster than real time (tests of long timeouts)."""

    def __init__(self, factor: float) -> None:
        if factor <= 0:
            raise ValueError(f"a clock's factor must be positive, not {factor}")
        self.factor = factor
        self._origin = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._origin) * self.factor

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.factor)

    def real_seconds(self, seconds: float) -> float:
        return seconds / self.factor


SYSTEM_CLOCK = SystemClock()
"""The clock the runtime uses unless it is given another."""
