"""The sans-I/O OVP gateway core, message by message, with ``now`` as a plain float."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from tests.ovp_cores import (
    EPOCH,
    client_event,
    drop_and_reopen,
    error_of,
    frame,
    of,
    server_event,
    started_gateway,
    texts,
)
from tests.test_ovp_support import AGENT, CALL, MOMENT, PCM, SESSION
from voxwire import ovp
from voxwire.ovp._session import AudioIn, Sent, SessionOver, SessionStateError
from voxwire.ovp.gateway_core import (
    ClientEvent,
    GatewayCore,
    GatewayState,
    Resumed,
    ToLink,
    refuse_token,
)
from voxwire.sansio import Close, Ignored, SendBinary, SendText

# ----------------------------------------------------------------------------- gateway core


def test_gateway_starts_with_seq_zero_and_the_audio_invariants() -> None:
    core = GatewayCore(SESSION, epoch=EPOCH)
    link, _ = core.open_link(0.0)
    with pytest.raises(SessionStateError):
        core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "x"}, 0)
    out = core.start(CALL, AGENT, 0.0)
    start = texts(out)[0]
    assert start["seq"] == 0 and start["session_id"] == SESSION
    assert (
        datetime.fromisoformat(start["ts"]) == MOMENT
    )  # the instant; its digits are the encoder's
    assert start["audio"] == {
        "sample_rate_hz": 16000,
        "sample_width_bits": 16,
        "channels": 1,
        "frame_ms": 20,
    }
    assert of(ToLink, out)[0].link == link
    with pytest.raises(SessionStateError):
        core.start(CALL, AGENT, 0.0)
    with pytest.raises(TypeError, match="start"):
        core.send(ovp.SessionEnd, {}, 0)


@pytest.mark.parametrize(
    ("data", "code", "details"),
    [
        (b"not json", "OVP_EVENT_SCHEMA_INVALID", None),
        (
            client_event("agent.input", 1, source="nope", text="x"),
            "OVP_EVENT_SCHEMA_INVALID",
            {"event_type": "agent.input"},
        ),
        (
            client_event("agent.teleport", 1),
            "OVP_EVENT_SCHEMA_INVALID",
            {"event_type": "agent.teleport"},
        ),
        (
            client_event("agent.thinking", 1, turn_id="t", delta="x"),
            "OVP_EVENT_DIRECTION_VIOLATION",
            {"event_type": "agent.thinking"},
        ),
        (
            client_event("session.update", 1, patch={}),
            "OVP_SESSION_UPDATE_REJECTED",
            {"event_type": "session.update"},
        ),
        (
            client_event("session.update", 1, patch={"agent_id": "x"}),
            "OVP_SESSION_UPDATE_REJECTED",
            {"event_type": "session.update"},
        ),
        (
            client_event("agent.input", 1, source="system", text="x" * 70000),
            "OVP_EVENT_SCHEMA_INVALID",
            None,
        ),
    ],
)
def test_gateway_answers_bad_client_events_and_keeps_the_link(
    data: bytes, code: str, details: dict[str, Any] | None
) -> None:
    core, link = started_gateway()
    out = core.receive_text(link, data, 1)
    error = error_of(out)
    assert error["code"] == code and error["recoverable"] is True and error["seq"] == 1
    assert error.get("details") == details
    assert not of(ClientEvent, out) and not of(Close, [o.action for o in of(ToLink, out)])


def test_gateway_answers_seq_regression_and_the_event_has_no_effect() -> None:
    core, link = started_gateway()
    assert of(ClientEvent, core.receive_text(link, client_event("dtmf.send", 5, digits="1"), 1))
    for seq in (5, 4, 0):  # equal is a regression too
        out = core.receive_text(link, client_event("dtmf.send", seq, digits="2"), 1)
        error = error_of(out)
        assert error["code"] == "OVP_SEQ_REGRESSION" and error["recoverable"] is True
        assert error["details"] == {"event_seq": seq, "event_type": "dtmf.send"}
        assert not of(ClientEvent, out)
    assert of(ClientEvent, core.receive_text(link, client_event("dtmf.send", 6, digits="3"), 1))


def test_gateway_answers_an_event_of_another_session() -> None:
    core, link = started_gateway()
    data = server_event("dtmf.send", 0, "other", digits="1")
    assert error_of(core.receive_text(link, data, 1))["code"] == "OVP_EVENT_SCHEMA_INVALID"


def test_gateway_applies_or_rejects_session_updates() -> None:
    refused = []

    def judge(patch: ovp.SessionPatch) -> str | None:
        refused.append(patch)
        return "unknown voice" if patch.voice_id == "nope" else None

    core, link = started_gateway(accept_patch=judge)
    out = core.receive_text(
        link,
        client_event(
            "session.update",
            0,
            patch={"voice_id": "v2", "speech_rate": 1.5, "caller_context": {"tier": "gold"}},
        ),
        1,
    )
    assert of(ClientEvent, out)
    assert core.agent is not None and core.agent.voice_id == "v2" and core.agent.speech_rate == 1.5
    assert core.caller_context == {"tier": "gold"}
    out = core.receive_text(
        link, client_event("session.update", 1, patch={"voice_id": "nope", "language": "es-ES"}), 1
    )
    error = error_of(out)
    assert error["code"] == "OVP_SESSION_UPDATE_REJECTED" and error["message"] == "unknown voice"
    assert core.agent.voice_id == "v2" and core.agent.language == "en-US"  # atomic: nothing applied
    assert len(refused) == 2


def test_gateway_checks_state_dependent_client_events() -> None:
    core, link = started_gateway()
    release = client_event("supervisor.release", 0, operator_user_id="op")
    assert error_of(core.receive_text(link, release, 1))["code"] == "OVP_EVENT_SCHEMA_INVALID"
    core.receive_text(
        link, client_event("supervisor.takeover", 1, operator_user_id="op", resumable=False), 1
    )
    release = client_event("supervisor.release", 2, operator_user_id="op")
    assert error_of(core.receive_text(link, release, 1))["code"] == "OVP_EVENT_SCHEMA_INVALID"
    core.receive_text(
        link, client_event("supervisor.takeover", 3, operator_user_id="op", resumable=True), 1
    )
    release = client_event("supervisor.release", 4, operator_user_id="op")
    assert of(ClientEvent, core.receive_text(link, release, 1))
    accepted = client_event("agent.handoff_accepted", 5, operator_user_id="op", queue_wait_ms=1)
    assert error_of(core.receive_text(link, accepted, 1))["code"] == "OVP_EVENT_SCHEMA_INVALID"
    core.send(
        ovp.AgentHandoffRequested,
        {"reason": "policy", "caller_summary": "s", "sentiment": "neutral"},
        1,
    )
    accepted = client_event("agent.handoff_accepted", 6, operator_user_id="op", queue_wait_ms=1)
    assert of(ClientEvent, core.receive_text(link, accepted, 1))
    done = client_event(
        "agent.handoff_completed", 7, operator_user_id="op", agent_remains_observer=True
    )
    assert of(ClientEvent, core.receive_text(link, done, 1))
    failed = client_event("agent.handoff_failed", 8, reason="timeout", fallback="continue_ai")
    assert error_of(core.receive_text(link, failed, 1))["code"] == "OVP_EVENT_SCHEMA_INVALID"


def test_gateway_reports_bad_frames_at_most_once_a_second() -> None:
    core, link = started_gateway()
    assert of(AudioIn, core.receive_binary(link, frame(0, 0), 1.0))
    out = core.receive_binary(link, frame(1, 1), 1.0)  # direction must match the sender
    error = error_of(out)
    assert error["code"] == "OVP_AUDIO_FRAME_INVALID" and error["details"] == {"dropped_frames": 1}
    for size in (0, 651, 653):  # dropped, each an Ignored with its code; no error event yet
        out = core.receive_binary(link, frame(0, 2, size=size) + b"x" * max(0, size - 652), 1.2)
        assert [(type(o), getattr(o, "code", None)) for o in out] == [
            (Ignored, "OVP_AUDIO_FRAME_INVALID")
        ]
    assert core.next_deadline() == pytest.approx(2.0)
    assert core.tick(1.9) == []
    error = error_of(core.tick(2.0))
    assert error["code"] == "OVP_AUDIO_FRAME_INVALID" and error["details"] == {"dropped_frames": 3}
    error = error_of(core.receive_binary(link, frame(0, 0), 2.5))  # frame_seq did not advance
    assert error["code"] == "OVP_SEQ_REGRESSION" and error["details"] == {"dropped_frames": 1}
    out = core.receive_binary(link, frame(0, 0), 2.6)  # each code has its own limit
    assert [(type(o), getattr(o, "code", None)) for o in out] == [(Ignored, "OVP_SEQ_REGRESSION")]
    error = error_of(core.tick(3.5))
    assert error["code"] == "OVP_SEQ_REGRESSION" and error["details"] == {"dropped_frames": 1}
    assert of(AudioIn, core.receive_binary(link, frame(0, 1), 3.1))
    assert core.client_frames == 2


def test_gateway_ignores_frames_before_the_start() -> None:
    core = GatewayCore(SESSION, epoch=EPOCH)
    link, _ = core.open_link(0.0)
    assert of(Ignored, core.receive_binary(link, frame(0, 0), 0))
    assert of(Ignored, core.receive_text(link, client_event("dtmf.send", 0, digits="1"), 0))


def test_gateway_resume_replays_missed_events_in_order_before_live_ones() -> None:
    core, link = started_gateway()
    for _ in range(3):
        core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "x"}, 1)  # seq 1..3
    core.receive_text(link, client_event("dtmf.send", 0, digits="1"), 1)
    new = drop_and_reopen(core, link, 2.0, 3.0)
    out = core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "y"}, 4.0)  # seq 4, buffered only
    assert not of(ToLink, out)
    assert of(Ignored, core.receive_binary(new, frame(0, 0), 5))  # before the resume
    out = core.receive_text(new, client_event("session.resume", 1, last_server_seq=1), 5.0)
    assert [t["seq"] for t in texts(out)] == [2, 3, 4]
    assert all(o.link == new for o in of(ToLink, out)) and of(Resumed, out)[0].replayed == 3
    out = core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "z"}, 6.0)
    assert texts(out)[0]["seq"] == 5 and of(ToLink, out)[0].link == new


def test_gateway_resume_window_boundary_is_closed() -> None:
    for delay, resumes in [(30.0, True), (30.001, False)]:
        core, link = started_gateway()
        new = drop_and_reopen(core, link, 10.0, 10.0)
        assert core.dropped_at == 10.0
        out = core.receive_text(
            new, client_event("session.resume", 0, last_server_seq=0), 10.0 + delay
        )
        if resumes:
            assert of(Resumed, out)
        else:
            error = error_of(out)
            assert error["code"] == "OVP_RESUME_EXPIRED" and error["recoverable"] is False
            assert error["seq"] == 1  # last_server_seq + 1, never a regression for the client
            assert Close(1008, "resume refused") in [o.action for o in of(ToLink, out)]
            assert of(SessionOver, out)[0].code == "OVP_RESUME_EXPIRED"


def test_gateway_refuses_a_resumed_link_whose_first_event_is_not_the_resume() -> None:
    core, link = started_gateway()
    core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "x"}, 1)  # seq 1, missed by the client
    new = drop_and_reopen(core, link, 10.0, 11.0)
    out = core.receive_text(new, client_event("dtmf.send", 0, digits="1"), 12.0)
    error = error_of(out)
    assert (error["code"], error["recoverable"]) == ("OVP_EVENT_SCHEMA_INVALID", False)
    # Not part of the stream: had it taken seq 2, a client resuming after it would miss seq 1.
    assert error["seq"] == 2 and core.last_seq == 1
    assert ToLink(new, Close(1008, "resume refused")) in out and of(SessionOver, out)


def test_gateway_window_end_refuses_waiting_links_and_ends_the_session() -> None:
    core, link = started_gateway()
    new = drop_and_reopen(core, link, 10.0, 11.0)
    assert core.tick(40.0) == []
    out = core.tick(40.001)
    assert error_of(out)["code"] == "OVP_RESUME_EXPIRED"
    assert ToLink(new, Close(1008, "resume refused")) in out
    assert of(SessionOver, out)[0].code == "OVP_RESUME_EXPIRED" and core.next_deadline() is None


@pytest.mark.parametrize("last", [-1, "7", 1.5, None, 2**32])
def test_gateway_fails_closed_on_a_malformed_last_server_seq(last: object) -> None:
    core, link = started_gateway()
    new = drop_and_reopen(core, link, 1.0, 1.0)
    out = core.receive_text(new, client_event("session.resume", 0, last_server_seq=last), 2.0)
    assert error_of(out)["code"] == "OVP_RESUME_EXPIRED" and of(SessionOver, out)


def test_gateway_fails_closed_on_an_impossible_last_server_seq() -> None:
    core, link = started_gateway()
    new = drop_and_reopen(core, link, 1.0, 1.0)
    out = core.receive_text(new, client_event("session.resume", 0, last_server_seq=7), 2.0)
    error = error_of(out)
    assert error["code"] == "OVP_RESUME_EXPIRED" and error["seq"] == 8


def test_gateway_refuses_a_resume_it_can_no_longer_replay_in_full() -> None:
    core, link = started_gateway()
    core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "x"}, 0.0)  # seq 1, at t=0
    core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "x"}, 61.0)  # seq 2; 0 and 1 evicted
    new = drop_and_reopen(core, link, 62.0, 62.0)
    out = core.receive_text(new, client_event("session.resume", 0, last_server_seq=0), 63.0)
    assert error_of(out)["code"] == "OVP_RESUME_EXPIRED"


def test_gateway_resume_checks_seq_and_is_answered_on_a_resumed_link() -> None:
    core, link = started_gateway()
    core.receive_text(link, client_event("dtmf.send", 4, digits="1"), 1)
    new = drop_and_reopen(core, link, 2.0, 2.0)
    restarted = client_event("session.resume", 0, last_server_seq=0)  # a client restarting its seq
    out = core.receive_text(new, restarted, 3.0)
    assert (error_of(out)["code"], error_of(out)["recoverable"]) == ("OVP_SEQ_REGRESSION", False)
    assert of(SessionOver, out)[0].code == "OVP_SEQ_REGRESSION"
    core, link = started_gateway()
    new = drop_and_reopen(core, link, 2.0, 2.0)
    assert of(
        Resumed, core.receive_text(new, client_event("session.resume", 0, last_server_seq=0), 3)
    )
    again = core.receive_text(new, client_event("session.resume", 1, last_server_seq=0), 3.0)
    assert (error_of(again)["code"], error_of(again)["recoverable"]) == (
        "OVP_EVENT_SCHEMA_INVALID",
        True,
    )


@pytest.mark.parametrize("started", [True, False])
def test_a_gateway_refuses_to_resume_a_session_it_does_not_hold(started: bool) -> None:
    # A restarted gateway: the client's first event on its new link is session.resume, for a
    # session this gateway started anew on that very link (or has not started yet).
    core = GatewayCore(SESSION, epoch=EPOCH)
    link, _ = core.open_link(0.0)
    if started:
        core.start(CALL, AGENT, 0.0)
    out = core.receive_text(link, client_event("session.resume", 7, last_server_seq=14), 0.1)
    error = error_of(out)
    assert (error["code"], error["recoverable"], error["seq"]) == ("OVP_RESUME_EXPIRED", False, 15)
    assert "does not hold session" in error["message"]
    assert ToLink(link, Close(1008, "resume refused")) in out
    assert of(SessionOver, out)[0].code == "OVP_RESUME_EXPIRED"
    assert core.state is GatewayState.OVER


def test_a_client_that_missed_session_end_gets_it_by_resuming_within_the_window() -> None:
    core, link = started_gateway()
    core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "x"}, 1)  # seq 1
    core.end("agent_ended", 2.0)  # seq 2, then close 1000, but the link dies instead
    core.link_lost(link, 2.1)
    late = core.open_link(5.0)[0]
    out = core.receive_text(late, client_event("session.resume", 0, last_server_seq=0), 5.0)
    assert [t["seq"] for t in texts(out)] == [1, 2] and texts(out)[1]["type"] == "session.end"
    assert ToLink(late, Close(1000, "session ended")) in out
    core.link_lost(late, 5.1)  # that one dropped before the client answered the close, too
    assert core.state is GatewayState.END_UNDELIVERED
    in_time = core.open_link(35.1)[0]  # the window runs from the last drop
    out = core.receive_text(in_time, client_event("session.resume", 1, last_server_seq=1), 35.1)
    assert [t["type"] for t in texts(out)] == ["session.end"]
    core.link_lost(in_time, 35.2)
    too_late = core.open_link(65.3)[0]
    out = core.receive_text(too_late, client_event("session.resume", 2, last_server_seq=0), 65.3)
    assert error_of(out)["code"] == "OVP_RESUME_EXPIRED"


def test_a_resume_after_session_end_was_delivered_is_refused() -> None:
    core, link = started_gateway()
    core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "x"}, 1)
    core.end("agent_ended", 2.0)
    assert core.state is GatewayState.ENDING
    assert core.link_lost(link, 2.1, answered_close=True) == []  # the client read session.end
    assert core.state is GatewayState.OVER and core.replay_size == (0, 0)
    late, out = core.open_link(3.0)  # a still-valid token: refused at once, nothing replayed
    error = error_of(out)
    assert (error["code"], error["seq"]) == ("OVP_RESUME_EXPIRED", 3)
    assert "session.end was delivered" in error["message"]
    assert [t["type"] for t in texts(out)] == ["error"]
    assert ToLink(late, Close(1008, "resume refused")) in out
    assert core.receive_text(late, client_event("session.resume", 1, last_server_seq=0), 3) == [
        Ignored(f"a text message on link {late}, which is closing")
    ]


def test_gateway_resume_on_a_half_open_link_closes_the_old_one() -> None:
    core, link = started_gateway()
    new, _ = core.open_link(1.0)  # the old link was never seen to drop
    out = core.receive_text(new, client_event("session.resume", 0, last_server_seq=0), 2.0)
    assert ToLink(link, Close(1000, "resumed elsewhere")) in out and of(Resumed, out)
    assert core.link_lost(link, 3.0) == []  # the old link is no longer the session's
    assert core.current_link == new


def test_replay_buffer_is_bounded_by_count_and_bytes() -> None:
    core, _ = started_gateway()
    for _ in range(ovp.REPLAY_BUFFER_MAX_EVENTS + 10):
        core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "x"}, 1)
    assert core.replay_size[0] == ovp.REPLAY_BUFFER_MAX_EVENTS
    big = "y" * 60000
    for _ in range(100):
        core.send(ovp.AgentThinking, {"turn_id": "t", "delta": big}, 1)
    events, size = core.replay_size
    assert size <= ovp.REPLAY_BUFFER_MAX_BYTES and events < 100


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("OVP_LLM_UPSTREAM_FAILED", "error"),
        ("OVP_STT_UPSTREAM_FAILED", "error"),
        ("OVP_TTS_UPSTREAM_FAILED", "error"),
        ("OVP_INTERNAL_ERROR", "error"),
        ("OVP_CALLER_HANGUP", "caller_hangup"),
        ("OVP_MAX_DURATION_EXCEEDED", "max_duration"),
        ("OVP_SPEND_CAP_EXCEEDED", "spend_cap"),
    ],
)
def test_gateway_fatal_errors_are_followed_by_session_end(code: str, reason: str) -> None:
    core, link = started_gateway()
    out = core.fail(code, "it broke", 2.0)
    error, end = texts(out)
    assert error["code"] == code and error["recoverable"] is False
    assert end["type"] == "session.end" and end["reason"] == reason and end["error_code"] == code
    assert ToLink(link, Close(1000, "session ended")) in out and core.over is not None


def test_gateway_fail_follows_the_error_table() -> None:
    core, _ = started_gateway()
    error = error_of(core.fail("OVP_SEQ_REGRESSION", "m", 1))
    assert error["recoverable"] is True and core.over is None
    for code in (
        "OVP_TOOL_UNKNOWN",
        "OVP_TOOL_ARGS_INVALID",
        "OVP_AUTH_FAILED",
        "OVP_RESUME_EXPIRED",
    ):
        with pytest.raises(ValueError, match=code):
            core.fail(code, "m", 1)
    with pytest.raises(ValueError, match="recoverable: false"):
        core.fail("OVP_INTERNAL_ERROR", "m", 1, recoverable=True)
    with pytest.raises(ValueError, match="not in the error table"):
        core.fail("ACME_RATE_LIMITED", "m", 1)
    assert error_of(core.fail("ACME_RATE_LIMITED", "m", 1, recoverable=True))["recoverable"] is True


def test_gateway_end_carries_the_final_stats() -> None:
    core, link = started_gateway()
    core.send(
        ovp.AgentToolInvoke, {"turn_id": "t", "tool_call_id": "c", "name": "n", "arguments": {}}, 1
    )
    core.send(ovp.AgentBargeIn, {"turn_id": "t", "played_bytes": 32, "played_ms": 1}, 1)
    core.send(ovp.AgentOutput, {"turn_id": "t", "text": "a", "final": False}, 1)
    core.send(ovp.AgentOutput, {"turn_id": "t", "text": "ab", "final": True}, 1)
    core.receive_binary(link, frame(0, 0), 1)
    core.send_audio(PCM, 1)
    cost = ovp.CostBreakdown(
        llm_usd_micros=1, stt_usd_micros=2, tts_usd_micros=3, voice_termination_usd_micros=4
    )
    core.set_cost(cost)
    end = texts(core.end("agent_ended", 2.5))[0]
    assert end["stats"] == {
        "duration_ms": 2500,
        "turns": 1,
        "tool_calls": 1,
        "barge_ins": 1,
        "client_frames": 1,
        "server_frames": 1,
        "total_cost_usd_micros": 10,
        "cost_breakdown": {
            "llm_usd_micros": 1,
            "stt_usd_micros": 2,
            "tts_usd_micros": 3,
            "voice_termination_usd_micros": 4,
        },
    }
    with pytest.raises(SessionStateError):
        core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "x"}, 3)


def test_gateway_emits_quality_and_cost_every_five_seconds() -> None:
    core, link = started_gateway()
    assert core.next_deadline() == 5.0
    assert core.tick(5.0) == []  # no values supplied yet
    core.set_quality(packet_loss_pct=0.5, jitter_ms=3.0, rtt_ms=40.0, mos=4.2)
    core.set_cost(
        ovp.CostBreakdown(
            llm_usd_micros=5, stt_usd_micros=0, tts_usd_micros=0, voice_termination_usd_micros=0
        )
    )
    assert core.next_deadline() == 10.0
    sent = texts(core.tick(10.0))
    assert [t["type"] for t in sent] == ["call.quality.update", "agent.cost.tick"]
    assert sent[0]["mos"] == 4.2 and sent[1]["total_cost_usd_micros"] == 5
    core.link_lost(link, 11.0)
    out = core.tick(15.0)  # no link: kept for the replay all the same
    assert len(of(Sent, out)) == 2 and not of(ToLink, out)
    assert [t for t in (core.tick(31.0)) if isinstance(t, Sent)] != []  # a stall skips slots


def test_gateway_audio_while_the_client_is_away_is_dropped() -> None:
    core, link = started_gateway()
    (out,) = core.send_audio(PCM, 1)
    assert isinstance(out, ToLink) and isinstance(out.action, SendBinary)
    assert ovp.decode_frame(out.action.data, expected_direction=1).frame_seq == 0
    core.link_lost(link, 2)
    assert core.send_audio(PCM, 2) == [] and core.frames_unsent == 1
    new = core.open_link(3)[0]
    core.receive_text(new, client_event("session.resume", 0, last_server_seq=0), 3)
    (out,) = core.send_audio(PCM, 4)
    assert isinstance(out, ToLink) and isinstance(out.action, SendBinary)
    frame_ = ovp.decode_frame(out.action.data)
    assert frame_.frame_seq == 2 and frame_.rtp_timestamp == 640


def test_gateway_ends_the_session_before_its_seq_passes_the_bound() -> None:
    core, _ = started_gateway()
    core._stamper.next_seq = ovp.MAX_SEQ - 1
    out = core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "x"}, 1)
    error, end = texts(out)
    assert (error["code"], error["seq"]) == ("OVP_INTERNAL_ERROR", ovp.MAX_SEQ - 1)
    assert (end["type"], end["seq"]) == ("session.end", ovp.MAX_SEQ)


def test_a_second_connection_before_the_start_supersedes_the_first() -> None:
    core = GatewayCore(SESSION, epoch=EPOCH)
    first, _ = core.open_link(0)
    second, out = core.open_link(0)
    assert out == [ToLink(first, Close(1000, "superseded"))] and core.current_link == second


def test_abort_and_refuse_token() -> None:
    core, link = started_gateway()
    out = core.abort("shutting down", 1)
    assert ToLink(link, Close(1011, "session aborted")) in out
    assert of(SessionOver, out)[0].code == "OVP_INTERNAL_ERROR"
    send, close = refuse_token(SESSION, "token expired", epoch=EPOCH, now=0)
    assert isinstance(send, SendText) and close == Close(1008, "authentication failed")
    sent = json.loads(send.data)
    assert datetime.fromisoformat(sent.pop("ts")) == MOMENT
    assert sent == {
        "type": "error",
        "seq": 0,
        "session_id": SESSION,
        "code": "OVP_AUTH_FAILED",
        "message": "token expired",
        "recoverable": False,
    }


# ----------------------------------------------------------------------------- the stream


def thought(core: GatewayCore, now: float = 1.0) -> list[Any]:
    return core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "x"}, now)


def stream_out(core: GatewayCore, link: int, out: list[Any]) -> list[int]:
    """Report every text handed out as written until the stream runs dry; the seqs, in order."""
    seqs: list[int] = []
    while batch := [t["seq"] for t in texts(out)]:
        seqs += batch
        out = core.drained(link, 1024, 2.0)  # the queue (the default window) drained
    return seqs


def test_the_stream_hands_a_link_at_most_its_window_and_the_rest_as_it_is_written() -> None:
    core, link = started_gateway(window=4)  # session.start is the first of the 4
    outs = [thought(core) for _ in range(9)]  # seq 1..9
    assert [len(texts(out)) for out in outs] == [1, 1, 1, 0, 0, 0, 0, 0, 0]
    assert core.send_audio(PCM, 1.0) == [] and core.frames_unsent == 1  # behind: stale audio
    assert [t["seq"] for t in texts(core.drained(link, 3, 1.5))] == [4, 5, 6]
    assert [t["seq"] for t in texts(core.drained(link, 4, 1.6))] == [7, 8, 9]
    assert of(ToLink, core.send_audio(PCM, 1.7))  # caught up: audio flows again
    out = core.end("agent_ended", 2.0)  # seq 10, then the close once it is handed out
    assert [t["seq"] for t in texts(out)] == [10] and ToLink(
        link, Close(1000, "session ended")
    ) in out


def test_the_stream_holds_the_close_until_session_end_is_handed_out() -> None:
    core, link = started_gateway(window=2)
    thought(core)
    out = core.end("agent_ended", 2.0)  # seq 2 waits for room
    assert texts(out) == [] and not of(ToLink, out)
    out = core.drained(link, 2, 2.1)
    assert [t["type"] for t in texts(out)] == ["session.end"]
    assert out[-1] == ToLink(link, Close(1000, "session ended"))


@pytest.mark.parametrize("missed", [1, 1025, ovp.REPLAY_BUFFER_MAX_EVENTS - 1])
def test_a_resume_streams_its_replay_through_the_window(missed: int) -> None:
    core, link = started_gateway()
    new = drop_and_reopen(core, link, 1.0, 1.5)
    for _ in range(missed):  # seq 1..missed, while the client is away
        thought(core, 1.2)
    out = core.receive_text(new, client_event("session.resume", 0, last_server_seq=0), 2.0)
    assert of(Resumed, out) == [Resumed(new, missed)]
    assert len(texts(out)) == min(missed, 1024)  # never more than the window at once
    assert stream_out(core, new, out) == list(range(1, missed + 1))


def test_a_link_behind_what_the_replay_buffer_holds_is_cut() -> None:
    core, link = started_gateway(window=1)
    for _ in range(ovp.REPLAY_BUFFER_MAX_EVENTS + 1):  # seq 0 (unwritten) is evicted
        thought(core)
    out = core.drained(link, 1, 2.0)
    assert out == [ToLink(link, Close(1008, "too slow: the stream was evicted"))]
    assert core.drained(link, 1, 2.1) == [] and core.send_audio(PCM, 2.2) == []
