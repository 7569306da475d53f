"""The session layer (voxwire.session): the handler registry, the inbox and the timer every role
uses, without sockets."""

from __future__ import annotations

import asyncio
import logging

import pytest

from voxwire.brisvox.outputs import CommandFailed, EventsDropped
from voxwire.clock import ScaledClock
from voxwire.session import DeadlineTimer, HandlerFailure, Handlers, Inbox, watch_handler_failures

log = logging.getLogger("tests.session")


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 5.0))  # type: ignore[arg-type]


# -- handlers -----------------------------------------------------------------------------------


def test_a_message_without_a_handler_is_the_callers_and_one_with_runs_them_in_order() -> None:
    handlers = Handlers("s1", log)
    seen: list[str] = []
    handlers.add("user.text", lambda m: seen.append(f"first {m}"))
    handlers.add("user.text", lambda m: seen.append(f"second {m}"))
    assert not handlers.dispatch("bot.text", "x") and seen == []
    assert handlers.dispatch("user.text", "hi") and seen == ["first hi", "second hi"]


def test_sync_and_async_handlers_that_raise_are_logged_counted_and_watched(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        handlers = Handlers("s1", log)

        def sync(message: object) -> None:
            raise ValueError("sync broke")

        async def later(message: object) -> None:
            await asyncio.sleep(0)
            raise KeyError("async broke")

        handlers.add("user.text", sync)
        handlers.add("user.text", later)
        failures: list[HandlerFailure] = []
        with watch_handler_failures(failures.append):
            assert handlers.dispatch("user.text", "hi")
            assert handlers.errors == 1  # the sync one, at once
            await asyncio.gather(*handlers.tasks, return_exceptions=True)
        assert handlers.errors == 2 and handlers.tasks == set()
        assert [str(f) for f in failures] == [
            "session s1: a user.text handler raised ValueError: sync broke",
            "session s1: a user.text handler raised KeyError: 'async broke'",
        ]
        handlers.dispatch("user.text", "unwatched")  # outside the block: logged, not watched
        await asyncio.gather(*handlers.tasks, return_exceptions=True)
        assert len(failures) == 2 and handlers.errors == 4

    with caplog.at_level(logging.ERROR, logger=log.name):
        run(main())
    lines = [r for r in caplog.records if r.name == log.name]
    assert [r.getMessage() for r in lines[:2]] == ["session s1: a user.text handler raised"] * 2
    assert all(r.exc_info is not None for r in lines)


def test_done_hears_every_handler_finish_with_the_first_error_and_a_refusal_is_no_failure() -> None:
    async def main() -> None:
        handlers = Handlers("s1", log, refusal=CommandFailed)
        answers: list[BaseException | None] = []

        async def refuse(message: object) -> None:
            raise CommandFailed("unsupported", "no")

        handlers.add("say", lambda m: None)
        assert handlers.dispatch("say", "x", answers.append) and answers == [None]
        handlers.add("transfer", refuse)
        handlers.dispatch("transfer", "x", answers.append)
        while handlers.tasks:
            await asyncio.gather(*handlers.tasks, return_exceptions=True)
        assert isinstance(answers[1], CommandFailed) and handlers.errors == 0

    run(main())


def test_a_cancelled_handler_gets_no_answer() -> None:
    async def main() -> None:
        handlers = Handlers("s1", log)
        answers: list[BaseException | None] = []
        handlers.add("say", lambda m: asyncio.sleep(10))
        handlers.dispatch("say", "x", answers.append)
        await asyncio.sleep(0)
        handlers.cancel()
        await asyncio.gather(*handlers.tasks, return_exceptions=True)
        assert answers == [] and handlers.errors == 0

    run(main())


# -- the inbox ----------------------------------------------------------------------------------


def test_the_inbox_drops_the_newest_when_full_and_reports_where_the_gap_is() -> None:
    async def main() -> None:
        inbox: Inbox[str | EventsDropped] = Inbox(2, gap=EventsDropped)
        assert [inbox.put(x) for x in "abcd"] == [True, True, False, False]
        assert await inbox.get() == "a"
        assert inbox.put("e")  # the gap's mark takes no room of the bound: b and e fit
        assert not inbox.put("f")  # counted with the first gap, which is not taken yet
        inbox.close("end")
        assert not inbox.put("after the end")
        assert [item async for item in inbox] == ["b", EventsDropped(3), "e", "end"]
        assert inbox.lost == 4 and inbox.closed and await inbox.get() is None

    run(main())


def test_a_second_gap_after_the_first_was_taken_is_reported_where_it_is() -> None:
    async def main() -> None:
        inbox: Inbox[str | EventsDropped] = Inbox(1, gap=EventsDropped)
        inbox.put("a")
        inbox.put("lost")
        assert [await inbox.get(), await inbox.get()] == ["a", EventsDropped(1)]
        assert inbox.put("b") and not inbox.put("lost") and not inbox.put("lost")
        inbox.close()
        assert [item async for item in inbox] == ["b", EventsDropped(2)]

    run(main())


def test_put_always_passes_the_bound_and_takes_room_until_it_is_taken() -> None:
    async def main() -> None:
        inbox: Inbox[str] = Inbox(1)
        inbox.put_always("link down")
        assert not inbox.put("command") and inbox.lost == 1
        assert await inbox.get() == "link down" and inbox.put("command")
        inbox.close()
        inbox.put_always("after the end")
        assert [item async for item in inbox] == ["command"]

    run(main())


def test_the_inbox_calls_before_wait_only_when_it_must_wait_and_at_end_for_its_error() -> None:
    async def main() -> None:
        waits: list[int] = []
        inbox: Inbox[int] = Inbox(
            4, before_wait=lambda: waits.append(1), at_end=lambda: RuntimeError("failed")
        )
        inbox.put(1)
        assert await inbox.get() == 1 and waits == []
        getting = asyncio.ensure_future(inbox.get())
        await asyncio.sleep(0)
        assert waits == [1]
        inbox.put(2)
        assert await getting == 2
        inbox.close()
        with pytest.raises(RuntimeError, match="failed"):
            await inbox.__anext__()

    run(main())


def test_an_inbox_consumer_cancelled_while_waiting_leaves_the_next_item_to_the_next_one() -> None:
    async def main() -> None:
        inbox: Inbox[int] = Inbox(2)
        first = asyncio.ensure_future(inbox.get())
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        assert inbox.put(1) and inbox.put(2)
        assert not inbox.put(3) and inbox.lost == 1  # the bound
        assert [await inbox.get(), await inbox.get()] == [1, 2]
        waiting = [asyncio.ensure_future(inbox.get()) for _ in range(2)]
        await asyncio.sleep(0)
        inbox.put(4)
        inbox.close()
        assert await asyncio.gather(*waiting) == [4, None]

    run(main())


def test_an_inbox_holds_at_least_one_item() -> None:
    with pytest.raises(ValueError, match="at least 1 item, not 0"):
        Inbox(0)
    assert Inbox(1).maxsize == 1


# -- the timer ----------------------------------------------------------------------------------


def test_the_timer_fires_at_the_deadline_on_the_clock_never_before() -> None:
    async def main() -> None:
        clock = ScaledClock(100)  # 1 clock second is 10 ms
        deadlines = [clock.now() + 2.0]
        fired: list[float] = []

        def fire(now: float) -> None:
            fired.append(now)
            deadlines.pop(0)

        timer = DeadlineTimer(clock, lambda: deadlines[0] if deadlines else None, fire)
        timer.update()
        assert timer.at == deadlines[0]
        due = deadlines[0]
        async with asyncio.timeout(2.0):
            while not fired:
                await asyncio.sleep(0.001)
        assert fired[0] >= due and timer.at is None  # nothing left: not set again

    run(main())


def test_a_sooner_deadline_resets_the_timer_and_a_later_one_fires_it_early_for_nothing() -> None:
    async def main() -> None:
        clock = ScaledClock(100)
        deadline: list[float | None] = [clock.now() + 50.0]
        fired: list[float] = []
        timer = DeadlineTimer(clock, lambda: deadline[0], fired.append)
        timer.update()
        first = deadline[0]
        deadline[0] = clock.now() + 1.0  # sooner: set for it
        timer.update()
        assert timer.at == deadline[0] != first
        deadline[0] = clock.now() + 300.0  # later: the timer fires at 1.0, finds nothing due
        timer.update()  # and is set again, for the later one
        async with asyncio.timeout(2.0):
            while timer.at != deadline[0]:
                await asyncio.sleep(0.001)
        assert fired == []
        timer.cancel()
        assert timer.at is None

    run(main())
