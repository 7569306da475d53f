"""Per-session statistics on scripted calls: a known gap, jitter, turn delay and resume, played
on explicit times and compared exactly; every bound crossed (N and N+1)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from codegen.ir import Protocol
from voxwire import brisvox, ovp
from voxwire.observe.snapshot import LATENCY_BOUNDS_MS
from voxwire.observe.stats import (
    MAX_LISTED,
    MAX_OPEN_TOOL_CALLS,
    MAX_POINTS,
    SessionStats,
    StatsError,
)

EPOCH = datetime(2026, 5, 14, 12, 0, tzinfo=UTC)
MODULES: dict[str, Any] = {"brisvox": brisvox, "ovp": ovp}


class Call:
    """Feeds a SessionStats with messages built from the spec's own examples."""

    def __init__(self, protocols: dict[str, Protocol], protocol: str) -> None:
        self.protocol = protocols[protocol]
        self.module = MODULES[protocol]
        self.stats = SessionStats.of(protocol)
        self.sizes = 0

    def message(self, sender: str, wire_type: str, t: float, **fields: Any) -> None:
        found = next(m for m in self.protocol.messages if m.type == wire_type)
        data = {**found.examples[0].json, **fields}
        if "ts" in fields:
            data["ts"] = (
                (EPOCH + timedelta(seconds=fields["ts"])).isoformat().replace("+00:00", "Z")
            )
        text = json.dumps({k: v for k, v in data.items() if v is not None})
        self.stats.on_message(sender, self.module.decode(text, sender), t, size=len(text))
        self.sizes += len(text)

    def frame(self, sender: str, t: float, seq: int, clock: int, flags: int = 0) -> None:
        direction = ovp.FrameDirection.CLIENT_TO_SERVER
        if sender == "server":
            direction = ovp.FrameDirection.SERVER_TO_CLIENT
        frame = ovp.AudioFrame(
            flags=flags, direction=direction, frame_seq=seq, rtp_timestamp=clock, pcm=bytes(640)
        )
        self.stats.on_frame(sender, ovp.decode_frame(ovp.encode_frame(frame)), t)


@pytest.fixture
def ovp_call(protocols: dict[str, Protocol]) -> Call:
    return Call(protocols, "ovp")


@pytest.fixture
def brisvox_call(protocols: dict[str, Protocol]) -> Call:
    return Call(protocols, "brisvox")


def test_an_ovp_call_with_a_gap_jitter_two_turns_a_tool_error_and_a_resume(ovp_call: Call) -> None:
    call = ovp_call
    call.message("server", "session.start", 0.0, seq=0, ts=0.0)
    # Client audio, 320 clock units a frame: frame 2 is 5 ms late, frame 4 never comes.
    call.frame("client", 0.100, 0, 1000, ovp.FLAG_SILENCE)
    call.frame("client", 0.120, 1, 1320)
    call.frame("client", 0.145, 2, 1640)  # |D| = 5 ms: J = 5/16 ms
    call.frame("client", 0.160, 3, 1960)  # |D| = 5 ms: J += (5 - J) / 16
    call.frame("client", 0.200, 5, 2600)  # on time after the gap: D = 0
    # The caller's turn, answered 250 ms later; an operator's transcript ends no turn.
    call.message("server", "transcript.final", 1.0, seq=1, ts=1.0, speaker="caller")
    call.message("server", "agent.tool.invoke", 1.1, seq=2, ts=1.1, tool_call_id="tc_1")
    call.message("server", "agent.thinking", 1.25, seq=3, ts=1.25)
    call.message(
        "server", "agent.tool.error", 1.5, seq=4, ts=1.5, tool_call_id="tc_1", duration_ms=400
    )
    call.message("server", "transcript.final", 2.0, seq=5, ts=2.0, speaker="operator")
    call.message("server", "transcript.final", 3.0, seq=6, ts=3.0, speaker="caller")
    call.message("server", "agent.output", 3.3, seq=7, ts=3.3)  # 300 ms: the bound, inclusive
    call.message("server", "transcript.final", 3.5, seq=7, ts=3.5, speaker="caller")  # a repeat
    # The link drops; the client resumes 1.5 s later and two events made meanwhile are replayed.
    call.stats.on_link("lost", 4.0)
    call.stats.on_link("open", 5.5)
    call.message("client", "session.resume", 5.5, seq=0, ts=5.5, last_server_seq=7)
    call.message("server", "audio.egress", 5.6, seq=10, ts=4.5)  # 8 and 9 never read
    call.message("server", "agent.thinking", 5.6, seq=11, ts=5.4)
    call.message("server", "agent.thinking", 5.7, seq=12, ts=5.7)
    call.message("server", "agent.thinking", 5.8, seq=13, ts=5.0)  # after a live one: not counted
    s = call.stats.snapshot()

    assert (s.protocol, s.started_at, s.last_at, s.duration) == ("ovp", 0.0, 5.8, 5.8)
    client, server = s.directions["client"], s.directions["server"]
    assert (client.frames, client.silent_frames, client.audio_s, client.silence_s) == (
        5,
        1,
        0.1,
        0.02,
    )
    assert (client.frame_gaps, client.frames_missing, client.frames_late) == (1, 1, 0)
    assert client.jitter_max_ms == 5 / 16 + (5 - 5 / 16) / 16 == 0.60546875
    assert client.jitter_ms == 0.60546875 - 0.60546875 / 16 == 0.567626953125
    assert (server.frames, server.jitter_ms, server.jitter_max_ms) == (0, None, None)
    assert (server.messages, server.seq_gaps, server.seq_missing, server.seq_repeats) == (
        13,
        1,
        2,
        1,
    )
    assert (client.messages, client.seq_gaps, client.seq_repeats) == (1, 0, 0)
    assert server.message_bytes + client.message_bytes == call.sizes
    assert (s.turns, s.turns_answered) == (2, 2)
    assert [(x.ended_at, x.answered_at, x.latency) for x in s.turn_list] == [
        (1.0, 1.25, 0.25),
        (3.0, 3.3, 0.3),
    ]
    assert (s.turn_latency.count, s.turn_latency.total, s.turn_latency.mean) == (2, 0.55, 0.275)
    assert (s.turn_latency.minimum, s.turn_latency.maximum) == (0.25, 0.3)
    assert s.turn_latency.histogram == (0, 0, 2, *[0] * (len(LATENCY_BOUNDS_MS) - 2))
    assert s.tool_calls == 1 and dict(s.tool_outcomes) == {"ok": 0, "error": 1, "cancelled": 0}
    (tool,) = s.tool_list
    assert (tool.key, tool.name, tool.started_at, tool.ended_at) == (
        "tc_1",
        "lookup_order",
        1.1,
        1.5,
    )
    assert (tool.outcome, tool.duration, tool.stated_ms) == ("error", 0.4, 400)
    assert (s.links, s.link_losses, s.resumes, s.events_lost) == (2, 1, 1, 0)
    (resume,) = s.resume_list
    assert (resume.lost_at, resume.resumed_at, resume.duration) == (4.0, 5.5, 1.5)
    assert (resume.replayed, resume.events_lost, s.events_replayed) == (2, 0, 2)


def test_a_brisvox_call_with_tool_outcomes_a_cut_turn_a_resume_and_lost_events(
    brisvox_call: Call,
) -> None:
    call = brisvox_call
    call.message("server", "session.start", 0.0, seq=1, t_ms=0)
    call.message("agent", "session.accept", 0.01)
    call.message("server", "turn.user_ended", 1.0, seq=2, t_ms=1000)
    call.message("server", "tool.call", 1.1, seq=3, t_ms=1100, id=1, name="check_hours")
    call.message("agent", "tool.result", 1.2, id=1, error="closed today", result=None)
    call.message("server", "tool.call", 1.3, seq=4, t_ms=1300, id=2)
    call.message("server", "tool.cancel", 1.35, seq=5, t_ms=1350, id=2)
    call.message("agent", "tool.result", 1.36, id=2)  # late: the call is over already
    call.message("server", "tool.call", 1.4, seq=6, t_ms=1400, id=3)  # never answered
    call.message("server", "bot.text", 1.5, seq=7, t_ms=1500)  # answers the turn: 500 ms
    call.message("server", "turn.user_ended", 1.9, seq=15, t_ms=1900)  # 8..14 never read
    call.stats.on_link("lost", 2.0)  # the turn is cut
    call.message("server", "bot.text", 2.1, seq=16, t_ms=2100)  # answers nothing now
    resumed = {"attempt": 1, "previous_seq": 19, "down_ms": 750}
    call.message("server", "session.start", 2.75, seq=20, t_ms=2750, resume=resumed)
    call.message("agent", "session.accept", 2.76, resume=True)
    call.message("server", "events.lost", 2.8, seq=21, t_ms=2800, count=3)
    call.message("server", "turn.user_ended", 3.0, seq=22, t_ms=3000)
    call.message("agent", "end", 3.5, say="Goodbye!")  # a farewell answers: 500 ms
    call.message("server", "events.lost", 4.0, seq=23, t_ms=4000, count=2)  # backpressure
    s = call.stats.snapshot()

    server, agent = s.directions.values()
    assert (server.sender, server.messages, server.seq_gaps, server.seq_missing) == (
        "server",
        13,
        2,
        10,
    )
    assert (agent.sender, agent.messages, agent.seq_gaps, agent.frames) == ("agent", 5, 0, 0)
    assert [(x.ended_at, x.answered_at) for x in s.turn_list] == [
        (1.0, 1.5),
        (1.9, None),
        (3.0, 3.5),
    ]
    assert (s.turns, s.turns_answered, s.turn_latency.total) == (3, 2, 1.0)
    assert s.turn_latency.histogram[LATENCY_BOUNDS_MS.index(500)] == 2
    assert [(c.key, c.outcome, c.duration) for c in s.tool_list] == [
        ("1", "error", 0.1),
        ("2", "cancelled", 0.05),
        ("3", None, None),
    ]
    assert s.tool_list[0].name == "check_hours"
    assert dict(s.tool_outcomes) == {"ok": 0, "error": 1, "cancelled": 1}
    assert (s.tool_calls, s.tool_durations.count, s.tool_durations.total) == (3, 2, 0.15)
    (resume,) = s.resume_list
    assert (resume.lost_at, resume.resumed_at, resume.duration) == (2.0, 2.75, 0.75)
    assert (resume.events_lost, resume.replayed, s.events_lost) == (3, 0, 5)
    assert (s.links, s.link_losses) == (1, 1)  # no link event open recorded


def test_a_loss_report_after_other_events_is_no_resume_s(brisvox_call: Call) -> None:
    call = brisvox_call
    resumed = {"attempt": 1, "previous_seq": 1, "down_ms": 10}
    call.message("server", "session.start", 0.0, seq=1, t_ms=0)
    call.message("server", "session.start", 1.0, seq=2, t_ms=1000, resume=resumed)
    call.message("server", "turn.user_ended", 1.1, seq=3, t_ms=1100)
    call.message("server", "events.lost", 1.2, seq=4, t_ms=1200, count=7)
    s = call.stats.snapshot()
    assert (s.resume_list[0].lost_at, s.resume_list[0].duration) == (None, None)
    assert (s.resume_list[0].events_lost, s.events_lost) == (0, 7)


def test_jitter_on_an_8_khz_clock_is_the_same_in_milliseconds(ovp_call: Call) -> None:
    for seq, (t, clock) in enumerate([(0.0, 0), (0.02, 160), (0.045, 320), (0.06, 480)]):
        ovp_call.frame("server", t, seq, clock)
    assert ovp_call.stats.snapshot().directions["server"].jitter_ms == 0.60546875


def test_jitter_starts_only_after_two_consecutive_frames_and_again_on_a_new_link(
    ovp_call: Call,
) -> None:
    ovp_call.frame("client", 0.0, 0, 0)
    ovp_call.frame("client", 0.07, 2, 640)  # a gap: no clock rate learnt yet
    assert ovp_call.stats.snapshot().directions["client"].jitter_ms is None
    ovp_call.frame("client", 0.09, 3, 960)  # consecutive: 320 a frame, D = 0
    assert ovp_call.stats.snapshot().directions["client"].jitter_ms == 0.0
    ovp_call.stats.on_link("lost", 0.1)
    ovp_call.frame("client", 5.0, 4, 1280)  # 4.9 s late, but on a new link: no D
    assert ovp_call.stats.snapshot().directions["client"].jitter_ms == 0.0


def test_frame_seq_wraps_and_what_is_behind_by_half_the_range_is_late(ovp_call: Call) -> None:
    half = 2**31
    for t, seq in enumerate([2**32 - 1, 0, half - 1, half - 1 + half]):
        ovp_call.frame("client", t, seq, t * 320)
    d = ovp_call.stats.snapshot().directions["client"]
    # 0 follows 2^32 - 1; 2^31 - 1 is ahead of 0 by 2^31 - 1 (a gap); 2^32 - 1 is ahead by 2^31:
    # behind, late.
    assert (d.frame_gaps, d.frames_missing, d.frames_late) == (1, half - 2, 1)


def test_a_repeated_or_earlier_frame_is_late(ovp_call: Call) -> None:
    for t, seq in enumerate([0, 1, 3, 2, 3]):
        ovp_call.frame("server", t / 50, seq, seq * 320)
    d = ovp_call.stats.snapshot().directions["server"]
    assert (d.frames, d.frame_gaps, d.frames_missing, d.frames_late) == (5, 1, 1, 2)


@pytest.mark.parametrize(("bound", "over"), [(0, 1), (1, 0)])
def test_a_latency_on_a_bound_is_in_its_bucket_and_a_microsecond_more_in_the_next(
    ovp_call: Call, bound: int, over: int
) -> None:
    for i, limit in enumerate(LATENCY_BOUNDS_MS):
        start = 10.0 * i
        ovp_call.message("server", "transcript.final", start, seq=2 * i, speaker="caller")
        answered = start + limit / 1000 + over / 1e6
        ovp_call.message("server", "agent.output", answered, seq=2 * i + 1)
    histogram = ovp_call.stats.snapshot().turn_latency.histogram
    assert histogram == (bound, *[1] * (len(LATENCY_BOUNDS_MS) - 1), over)


@pytest.mark.parametrize("count", [MAX_LISTED, MAX_LISTED + 1])
def test_turns_tool_calls_and_resumes_are_listed_up_to_the_bound_and_all_counted(
    brisvox_call: Call, count: int
) -> None:
    call, resumed = brisvox_call, {"attempt": 1, "previous_seq": 1, "down_ms": 1}
    for i in range(count):
        t = float(i)
        call.message("server", "turn.user_ended", t, seq=4 * i + 1)
        call.message("server", "tool.call", t + 0.1, seq=4 * i + 2, id=i)
        call.message("agent", "tool.result", t + 0.2, id=i)
        call.message("server", "session.start", t + 0.3, seq=4 * i + 3, resume=resumed)
        call.message("server", "bot.text", t + 0.5, seq=4 * i + 4)
    s = call.stats.snapshot()
    listed = min(count, MAX_LISTED)
    assert (s.turns, s.turns_answered, s.turn_latency.count) == (count, count, count)
    assert (s.tool_calls, s.tool_outcomes["ok"], s.resumes) == (count, count, count)
    assert (len(s.turn_list), len(s.tool_list), len(s.resume_list)) == (listed, listed, listed)
    assert s.turn_list[-1].answered_at == listed - 1 + 0.5


@pytest.mark.parametrize("count", [MAX_OPEN_TOOL_CALLS, MAX_OPEN_TOOL_CALLS + 1])
def test_tool_calls_awaiting_their_outcome_are_bounded(brisvox_call: Call, count: int) -> None:
    for i in range(count):
        brisvox_call.message("server", "tool.call", i / 1000, seq=i + 1, id=i)
    for i in range(count):
        brisvox_call.message("agent", "tool.result", 2 + i / 1000, id=i)
    s = brisvox_call.stats.snapshot()
    assert (s.tool_calls, s.tool_outcomes["ok"]) == (count, MAX_OPEN_TOOL_CALLS)


@pytest.mark.parametrize(("buckets", "width"), [(MAX_POINTS, 0.02), (MAX_POINTS + 1, 0.04)])
def test_the_plot_series_stays_bounded_by_doubling_its_buckets(
    ovp_call: Call, buckets: int, width: float
) -> None:
    for i in range(buckets):
        ovp_call.frame("client", i * 0.02, i, i * 320)
    series = ovp_call.stats.snapshot().directions["client"].series
    assert {p.width for p in series} == {width}
    assert sum(p.frames for p in series) == buckets
    assert len(series) == (buckets if width == 0.02 else math.ceil(buckets / 2))
    assert all(p.jitter_ms == 0.0 for p in series[1:])


def test_the_series_keeps_the_highest_jitter_and_the_missing_frames_of_a_merged_bucket(
    ovp_call: Call,
) -> None:
    ovp_call.frame("client", 0.0, 0, 0)
    ovp_call.frame("client", 0.02, 1, 320)
    ovp_call.frame("client", 0.045, 2, 640)  # 5 ms late: J = 0.3125 ms
    ovp_call.frame("client", 0.07, 4, 1280)  # one missing, and 15 ms early
    ovp_call.frame("client", MAX_POINTS * 0.02, 5, 1600)  # far on: the buckets double
    series = ovp_call.stats.snapshot().directions["client"].series
    assert [(p.t, p.frames, p.missing) for p in series[:2]] == [(0.0, 2, 0), (0.04, 2, 1)]
    assert series[1].jitter_ms == 0.3125 + (15 - 0.3125) / 16 == 1.23046875


def test_bad_inputs_are_named(ovp_call: Call, brisvox_call: Call) -> None:
    stats = ovp_call.stats
    with pytest.raises(
        StatsError, match="sender must be one of \\('server', 'client'\\), not 'agent'"
    ):
        stats.on_unreadable("agent", 0.0, size=1)
    with pytest.raises(StatsError, match="a time is a finite number of seconds, not nan"):
        stats.on_link("lost", math.nan)
    with pytest.raises(StatsError, match=r"a link event is one of .*, not 'dropped'"):
        stats.on_link("dropped", 1.0)
    with pytest.raises(StatsError, match="brisvox carries no audio frames"):
        brisvox_call.frame("server", 0.0, 0, 0)
    with pytest.raises(StatsError, match="no statistics for protocol 'sip'"):
        SessionStats.of("sip")
    assert isinstance(StatsError("x"), ValueError)


def test_unreadable_input_counts_its_bytes_and_nothing_else(ovp_call: Call) -> None:
    ovp_call.stats.on_unreadable("client", 1.5, size=652)
    s = ovp_call.stats.snapshot()
    d = s.directions["client"]
    assert (d.unreadable, d.message_bytes, d.messages, d.frames, d.series) == (1, 652, 0, 0, ())
    assert (s.started_at, s.last_at) == (1.5, 1.5)


def test_an_empty_session(ovp_call: Call) -> None:
    s = ovp_call.stats.snapshot()
    assert (s.started_at, s.duration, s.turns, s.turn_latency.mean, s.turn_latency.minimum) == (
        None,
        0.0,
        0,
        None,
        None,
    )
