"""The sans-I/O outbound queue and keepalive, message by message, with ``now`` as a float."""

from __future__ import annotations

import pytest

from voxwire.link import (
    TRANSITIONS,
    Keepalive,
    KeepaliveAction,
    Outbound,
    OutboundEvent,
    OutboundState,
    Overflow,
    Put,
)
from voxwire.sansio import Close, SendBinary, SendText

N = 8


def text(n: int | str) -> SendText:
    return SendText(f'{{"n":"{n}"}}'.encode())


def lost(count: int) -> SendText:
    return SendText(f'{{"lost":{count}}}'.encode())


def state_of(queue: Outbound) -> OutboundState:
    """The state now (a plain read, so the type checker does not keep an earlier narrowing)."""
    return queue.state


def datas(queue: Outbound, now: float = 0.0) -> list[bytes]:
    return [frame.data for frame in queue.take(now).frames]


# -- the two classes ----------------------------------------------------------------------------


def test_control_goes_before_queued_events() -> None:
    queue = Outbound(event_bound=N, overflow=Overflow.DROP)
    queue.event(text(1))
    queue.control(text("c"))
    queue.event(text(2))
    assert datas(queue) == [text("c").data, text(1).data, text(2).data]


def test_without_control_first_the_queued_order_is_kept() -> None:
    queue = Outbound(event_bound=N, overflow=Overflow.WAIT, control_first=False)
    queue.event(text(1))
    queue.control(text("c"))
    queue.event(text(2))
    assert datas(queue) == [text(1).data, text("c").data, text(2).data]


def test_control_does_not_count_against_the_event_bound() -> None:
    queue = Outbound(event_bound=1, overflow=Overflow.WAIT, control_first=False)
    assert queue.event(text(1)) is Put.QUEUED
    assert all(queue.control(text(f"c{i}")) is Put.QUEUED for i in range(3))
    assert queue.event(text(2)) is Put.FULL


# -- the event bound: N, N+1, and the largest burst ----------------------------------------------


def test_drop_n_events_fit_and_the_next_is_dropped_and_reported_where_the_gap_is() -> None:
    queue = Outbound(event_bound=N, overflow=Overflow.DROP, report_lost=lost)
    assert [queue.event(text(i)) for i in range(N)] == [Put.QUEUED] * N
    assert queue.room == 0
    assert queue.event(text(N)) is Put.DROPPED
    assert queue.event(text(N + 1)) is Put.DROPPED
    assert (queue.lost, queue.lost_total) == (2, 2)
    assert datas(queue) == [*(text(i).data for i in range(N)), lost(2).data]
    assert queue.lost == 0 and queue.lost_total == 2
    assert queue.event(text("after")) is Put.QUEUED
    assert datas(queue) == [text("after").data]


def test_drop_without_a_report_only_counts() -> None:
    queue = Outbound(event_bound=1, overflow=Overflow.DROP)
    queue.event(text(1))
    assert queue.event(text(2)) is Put.DROPPED
    assert datas(queue) == [text(1).data]
    assert queue.lost_total == 1


def test_wait_refuses_event_n_plus_one_until_a_take_makes_room() -> None:
    queue = Outbound(event_bound=N, overflow=Overflow.WAIT)
    assert [queue.event(text(i)) for i in range(N)] == [Put.QUEUED] * N
    assert queue.event(text(N)) is Put.FULL
    assert queue.lost_total == 0
    assert len(datas(queue)) == N
    assert queue.room == N
    assert queue.event(text(N)) is Put.QUEUED


@pytest.mark.parametrize("count", [N, N + 1, 4096])
def test_a_feed_enters_at_most_the_bound_at_once_and_all_of_it_in_order(count: int) -> None:
    queue = Outbound(event_bound=N, overflow=Overflow.WAIT)
    queue.feed(text(i) for i in range(count))
    assert queue.waiting <= N
    written: list[bytes] = []
    while queue.pending:
        batch = datas(queue)
        assert 0 < len(batch) <= N
        written += batch
    assert written == [text(i).data for i in range(count)]


def test_a_replay_of_4096_through_a_bound_of_1024_never_overflows() -> None:
    queue = Outbound(event_bound=1024, overflow=Overflow.WAIT)
    queue.feed(text(i) for i in range(4096))
    sizes = []
    while queue.pending:
        assert queue.waiting <= 1024
        sizes.append(len(queue.take(0.0).frames))
    assert sizes == [1024] * 4
    assert queue.lost_total == 0


def test_events_queued_after_a_feed_wait_until_it_is_in() -> None:
    queue = Outbound(event_bound=2, overflow=Overflow.WAIT)
    queue.feed([text(1), text(2), text(3)])
    assert queue.room == 0
    assert queue.event(text("live")) is Put.FULL
    queue.control(text("c"))  # control still goes first
    assert datas(queue) == [text("c").data, text(1).data, text(2).data]
    assert queue.room == 1  # 3 is in now and the feed is done
    assert datas(queue) == [text(3).data]
    assert queue.event(text("live")) is Put.QUEUED


# -- the control bound ----------------------------------------------------------------------------


def test_control_n_fit_and_n_plus_one_takes_the_queue_down() -> None:
    queue = Outbound(event_bound=N, overflow=Overflow.DROP, control_bound=N)
    assert [queue.control(text(i)) for i in range(N)] == [Put.QUEUED] * N
    assert queue.control(text(N)) is Put.OVERFLOWED
    assert queue.state is OutboundState.DOWN
    assert not queue.pending and not queue.take(0.0)
    assert queue.event(text("late")) is Put.CLOSED


def test_a_take_resets_the_control_bound() -> None:
    queue = Outbound(event_bound=N, overflow=Overflow.DROP, control_bound=1)
    queue.control(text(1))
    queue.take(0.0)
    assert queue.control(text(2)) is Put.QUEUED


def test_bounds_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 event"):
        Outbound(event_bound=0, overflow=Overflow.DROP)
    with pytest.raises(ValueError, match="control_bound"):
        Outbound(event_bound=1, overflow=Overflow.DROP, control_bound=0)


# -- close ordering -------------------------------------------------------------------------------


def test_a_close_goes_out_after_what_was_queued_before_it_with_its_final_frames() -> None:
    queue = Outbound(event_bound=N, overflow=Overflow.DROP)
    queue.event(text(1))
    queue.control(text("c"))
    queue.close(1000, "bye", final=[text("end")])
    assert queue.state is OutboundState.CLOSING
    assert queue.event(text("late")) is Put.CLOSED
    assert queue.control(text("late")) is Put.CLOSED
    batch = queue.take(0.0)
    assert [f.data for f in batch.frames] == [text("c").data, text(1).data, text("end").data]
    assert batch.close == Close(1000, "bye")
    assert state_of(queue) is OutboundState.CLOSED
    assert not queue.pending


def test_a_close_waits_for_a_feed_to_be_written() -> None:
    queue = Outbound(event_bound=2, overflow=Overflow.WAIT)
    queue.feed([text(1), text(2), text(3)])
    queue.close(1000)
    first = queue.take(0.0)
    assert first.close is None and len(first.frames) == 2
    second = queue.take(0.0)
    assert [f.data for f in second.frames] == [text(3).data]
    assert second.close == Close(1000, "")


def test_a_second_close_changes_nothing_and_a_failure_after_the_close_is_ignored() -> None:
    queue = Outbound(event_bound=N, overflow=Overflow.DROP)
    queue.close(1000, "first")
    queue.close(1001, "second")
    assert queue.take(0.0).close == Close(1000, "first")
    queue.fail()
    assert queue.state is OutboundState.CLOSED


def test_a_failure_drops_what_is_queued() -> None:
    queue = Outbound(event_bound=N, overflow=Overflow.DROP)
    queue.event(text(1))
    queue.close(1000)
    queue.fail()
    assert queue.state is OutboundState.DOWN
    assert not queue.take(0.0)


def test_the_transition_table_covers_every_state_and_refuses_the_rest() -> None:
    assert {state for state, _ in TRANSITIONS} == set(OutboundState)
    queue = Outbound(event_bound=1, overflow=Overflow.DROP)
    assert (OutboundState.OPEN, OutboundEvent.CLOSE_TAKEN) not in TRANSITIONS
    with pytest.raises(RuntimeError, match="close taken while open"):
        queue._move(OutboundEvent.CLOSE_TAKEN)


# -- stamping -------------------------------------------------------------------------------------


def test_stamp_numbers_text_frames_in_write_order_with_now() -> None:
    count = 0

    def stamp(frame: SendText, now: float) -> SendText:
        nonlocal count
        count += 1
        return SendText(b'{"seq":%d,"t":%g,' % (count, now) + frame.data[1:])

    queue = Outbound(event_bound=N, overflow=Overflow.DROP, stamp=stamp)
    queue.event(text(1))
    queue.event(SendBinary(b"\x00"))
    queue.control(text("c"))
    assert datas(queue, now=1.5) == [
        b'{"seq":1,"t":1.5,"n":"c"}',
        b'{"seq":2,"t":1.5,"n":"1"}',
        b"\x00",
    ]


# -- keepalive ------------------------------------------------------------------------------------


def test_keepalive_pings_every_interval() -> None:
    keepalive = Keepalive(ping_interval=10.0, silence_timeout=30.0, now=0.0)
    assert keepalive.next_deadline() == 10.0
    assert keepalive.tick(9.99) is KeepaliveAction.NOTHING
    assert keepalive.tick(10.0) is KeepaliveAction.PING
    assert keepalive.tick(10.0) is KeepaliveAction.NOTHING
    assert keepalive.next_deadline() == 20.0


def test_keepalive_down_exactly_one_silence_timeout_after_the_last_sign_of_life() -> None:
    keepalive = Keepalive(ping_interval=10.0, silence_timeout=30.0, now=0.0)
    keepalive.heard(12.5)
    for now in (20.0, 30.0, 40.0):
        assert keepalive.tick(now) is KeepaliveAction.PING
    assert keepalive.next_deadline() == 42.5
    assert keepalive.tick(42.49) is KeepaliveAction.NOTHING
    assert keepalive.tick(42.5) is KeepaliveAction.DOWN
    assert keepalive.tick(50.0) is KeepaliveAction.NOTHING  # down once


def test_keepalive_a_late_sign_of_life_never_moves_it_back() -> None:
    keepalive = Keepalive(ping_interval=1.0, silence_timeout=3.0, now=5.0)
    keepalive.heard(4.0)
    assert keepalive.last_heard == 5.0


@pytest.mark.parametrize(("ping", "silence"), [(0.0, 1.0), (1.0, 0.0), (3.0, 3.0)])
def test_keepalive_refuses_intervals_that_cannot_work(ping: float, silence: float) -> None:
    with pytest.raises(ValueError):
        Keepalive(ping_interval=ping, silence_timeout=silence, now=0.0)
