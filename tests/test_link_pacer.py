"""The shared pacer: one timer for many senders, on a fixed grid, catching up missed ticks."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from voxwire.clock import ScaledClock
from voxwire.link.pacer import Pacer

PERIOD = 0.02


def run(main: Coroutine[Any, Any, None]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(10):
            await main

    asyncio.run(bounded())


def test_many_senders_share_one_wakeup_per_tick() -> None:
    async def main() -> None:
        pacer = Pacer(PERIOD)
        owed = [0] * 100

        async def sender(index: int) -> None:
            sent = await pacer.tick()
            for _ in range(20):
                due = await pacer.tick()
                owed[index] += due - sent
                sent = due

        await asyncio.gather(*(sender(i) for i in range(100)))
        assert pacer.wakeups == 21  # not 100 x 21
        assert len(set(owed)) == 1 and owed[0] >= 20  # each owes one frame per tick passed

    run(main())


def test_ticks_sit_on_a_grid_and_a_late_sender_is_told_what_it_owes() -> None:
    async def main() -> None:
        clock = ScaledClock(1.0)
        pacer = Pacer(PERIOD, clock)
        first = await pacer.tick()
        assert clock.now() >= pacer.origin + first * PERIOD - 0.002  # uvloop: ms timers
        await asyncio.sleep(PERIOD * 5.5)  # a busy sender misses ticks
        due = await pacer.tick()
        assert due - first >= 6

    run(main())


def test_the_timer_stops_when_nobody_waits_and_comes_back() -> None:
    async def main() -> None:
        pacer = Pacer(PERIOD)
        await pacer.tick()
        await asyncio.sleep(PERIOD * 3)
        assert pacer._task is not None and pacer._task.done()
        wakeups = pacer.wakeups
        await pacer.tick()
        assert pacer.wakeups == wakeups + 1

    run(main())


def test_a_cancelled_sender_does_not_cancel_the_others() -> None:
    async def main() -> None:
        pacer = Pacer(PERIOD)
        waiting = asyncio.ensure_future(pacer.tick())
        other = asyncio.ensure_future(pacer.tick())
        await asyncio.sleep(0)
        waiting.cancel()
        assert isinstance(await other, int)

    run(main())


def test_a_period_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Pacer(0.0)
