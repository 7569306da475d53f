"""The benchmark load generator's shared pacer: one timer for many senders, on a fixed grid, making up missed ticks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from benchmarks.pacer import Pacer

PERIOD = 0.02


def run(main: Coroutine[Any, Any, None]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(10):
            await main

    asyncio.run(bounded())


def counting(frames: int, counts: list[int], index: int) -> Any:
    def send(due: int) -> bool:
        counts[index] = min(frames, counts[index] + due)  # a late loop makes up several at once
        return counts[index] < frames

    return send


def test_many_senders_share_one_wakeup_per_tick_and_each_gets_its_frames() -> None:
    async def main() -> None:
        pacer = Pacer(PERIOD)
        counts = [0] * 300
        for index in range(300):
            pacer.add(counting(20, counts, index))
        began = time.monotonic()
        await pacer.idle()
        assert set(counts) == {20}
        assert pacer.wakeups <= 20  # one per tick, not 300 per tick
        assert time.monotonic() - began >= 19 * PERIOD  # real time, not a burst

    run(main())


def test_a_missed_tick_is_made_up_at_the_next() -> None:
    async def main() -> None:
        pacer = Pacer(PERIOD)
        dues: list[int] = []

        def send(due: int) -> bool:
            dues.append(due)
            if len(dues) == 2:
                time.sleep(PERIOD * 3.5)  # the loop is stuck for 3 ticks and more
            return len(dues) < 4

        pacer.add(send)
        await pacer.idle()
        assert dues[2] >= 3  # the three ticks and more the loop slept through, at once

    run(main())


def test_the_timer_stops_without_senders_and_comes_back() -> None:
    async def main() -> None:
        pacer = Pacer(PERIOD)
        pacer.add(lambda due: False)
        await pacer.idle()
        assert pacer._task is not None and pacer._task.done()
        counts = [0]
        pacer.add(counting(2, counts, 0))
        await pacer.idle()
        assert counts == [2]

    run(main())


def test_a_removed_sender_is_not_called_and_a_failing_one_is_reported() -> None:
    async def main() -> None:
        pacer = Pacer(PERIOD)
        called: list[str] = []

        def quiet(due: int) -> bool:
            called.append("quiet")
            return True

        def broken(due: int) -> bool:
            pacer.remove(quiet)
            raise RuntimeError("injected")

        pacer.add(broken)
        pacer.add(quiet)
        with pytest.raises(RuntimeError, match="injected"):
            await pacer.idle()
        assert called == [] and broken not in pacer and quiet not in pacer

    run(main())


def test_a_period_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Pacer(0.0)
