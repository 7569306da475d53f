"""The sans-I/O OVP client core, message by message, with ``now`` as a plain float."""

from __future__ import annotations

import json

import pytest

from tests.ovp_cores import (
    EPOCH,
    frame,
    of,
    server_event,
    start_event,
    started_client,
    texts,
    thinking,
)
from tests.test_ovp_support import MOMENT, NO_STATS, PCM, SESSION
from voxwire import ovp
from voxwire.ovp._session import (
    AUDIO_FORMAT,
    AudioIn,
    Sent,
    SessionOver,
    SessionStateError,
    check_session_id,
)
from voxwire.ovp.client_core import (
    ClientCore,
    ClientState,
    Dropped,
    Rejected,
    ServerEvent,
)
from voxwire.sansio import Close, Ignored, SendBinary

# ----------------------------------------------------------------------------- client core


def test_client_waits_for_session_start_and_checks_it() -> None:
    core = started_client()
    start = core.session_start
    assert start is not None and start.audio == AUDIO_FORMAT and start.seq == 0
    assert core.live and core.last_server_seq == 0


@pytest.mark.parametrize(
    "audio",
    [{"sample_rate_hz": 8000}, {"sample_width_bits": 8}, {"channels": 2}, {"frame_ms": 10}],
)
def test_client_refuses_a_session_start_with_other_audio_invariants(audio: dict[str, int]) -> None:
    core = ClientCore(SESSION, epoch=EPOCH)
    core.connected(0.0)
    out = core.receive_text(start_event(**audio), 0.1)
    assert of(Rejected, out)[0].error.code == ovp.ErrorCode.OVP_EVENT_SCHEMA_INVALID
    assert of(Close, out) and of(SessionOver, out)[0].code == "OVP_EVENT_SCHEMA_INVALID"
    assert not core.live


def test_client_refuses_a_session_start_with_a_seq_other_than_zero() -> None:
    core = ClientCore(SESSION, epoch=EPOCH)
    core.connected(0.0)
    over = of(SessionOver, core.receive_text(start_event(seq=3), 0.1))
    assert over and "not 0" in over[0].detail


def test_client_refuses_events_before_session_start() -> None:
    core = ClientCore(SESSION, epoch=EPOCH)
    core.connected(0.0)
    out = core.receive_text(thinking(1), 0.1)
    assert of(SessionOver, out)[0].detail == "agent.thinking before session.start"
    assert of(Close, out)[0].code == 1002


def test_client_drops_replayed_duplicates_and_accepts_gaps() -> None:
    core = started_client()
    assert of(ServerEvent, core.receive_text(thinking(1), 1))
    assert of(ServerEvent, core.receive_text(thinking(5), 1))  # a gap is no error
    for seq in (5, 3, 0):
        out = core.receive_text(thinking(seq), 1)
        assert of(Ignored, out) and not of(ServerEvent, out)
    assert core.last_server_seq == 5


def test_client_rejects_server_events_of_another_session_or_direction() -> None:
    core = started_client()
    out = core.receive_text(server_event("agent.thinking", 1, "other", turn_id="t", delta="x"), 1)
    assert of(Rejected, out)[0].error.code == ovp.ErrorCode.OVP_EVENT_SCHEMA_INVALID
    out = core.receive_text(server_event("agent.input", 2, source="system", text="x"), 1)
    assert of(Rejected, out)[0].error.code == ovp.ErrorCode.OVP_EVENT_DIRECTION_VIOLATION
    assert core.live and core.last_server_seq == 0  # dropped: no effect


def test_client_ignores_unknown_server_types_but_checks_their_envelope() -> None:
    core = started_client()
    out = core.receive_text(server_event("agent.mood", 1, mood="calm"), 1)
    assert of(Ignored, out) and not of(ServerEvent, out)
    assert core.last_server_seq == 1  # it still advances the server seq
    for bad in (
        server_event("agent.mood", -1),
        server_event("agent.mood", 2, "other"),
        json.dumps({"type": "agent.mood", "seq": "3", "session_id": SESSION}).encode(),
    ):
        assert of(Rejected, core.receive_text(bad, 1))
    assert core.last_server_seq == 1


def test_client_frames_are_checked_for_direction_size_and_order() -> None:
    core = started_client()
    assert of(AudioIn, core.receive_binary(frame(1, 7), 1))
    assert of(AudioIn, core.receive_binary(frame(1, 9), 1))  # a gap is loss, not an error
    for data, code in [
        (frame(0, 10), ovp.ErrorCode.OVP_AUDIO_FRAME_INVALID),
        (frame(1, 10, size=600), ovp.ErrorCode.OVP_AUDIO_FRAME_INVALID),
        (frame(1, 10, flags=0x08), ovp.ErrorCode.OVP_AUDIO_FRAME_INVALID),
        (frame(1, 9), ovp.ErrorCode.OVP_SEQ_REGRESSION),
        (frame(1, 3), ovp.ErrorCode.OVP_SEQ_REGRESSION),
    ]:
        assert of(Rejected, core.receive_binary(data, 1))[0].error.code == code
    assert of(AudioIn, core.receive_binary(frame(1, 10), 1))


def test_frame_seq_wraps_in_serial_arithmetic() -> None:
    core = started_client()
    assert of(AudioIn, core.receive_binary(frame(1, 2**32 - 1), 1))
    assert of(AudioIn, core.receive_binary(frame(1, 0), 1))
    assert of(Rejected, core.receive_binary(frame(1, 2**31), 1))


def test_client_outbound_seq_never_goes_back_across_a_resume() -> None:
    core = started_client()
    for expected in range(3):
        out = core.send(ovp.AgentInput, {"source": "system", "text": "x"}, 1)
        assert of(Sent, out)[0].message.seq == expected
    core.receive_text(thinking(4), 1)
    dropped = of(Dropped, core.link_lost(2.0))[0]
    assert dropped.resume_by == 32.0 and not core.live
    with pytest.raises(SessionStateError):
        core.send(ovp.AgentInput, {"source": "system", "text": "x"}, 3)
    resume = texts(core.connected(5.0))[0]
    assert resume["type"] == "session.resume"
    assert resume["seq"] == 3 and resume["last_server_seq"] == 4
    out = core.send(ovp.AgentInput, {"source": "system", "text": "x"}, 6)
    assert of(Sent, out)[0].message.seq == 4


def test_client_send_refuses_what_the_client_may_not_send() -> None:
    core = ClientCore(SESSION, epoch=EPOCH)
    core.connected(0.0)
    with pytest.raises(SessionStateError):
        core.send(ovp.AgentInput, {"source": "system", "text": "x"}, 0)
    core.receive_text(start_event(), 0)
    with pytest.raises(TypeError, match="not an event this side sends"):
        core.send(ovp.AgentThinking, {"turn_id": "t", "delta": "x"}, 0)
    with pytest.raises(TypeError, match=r"session\.resume"):
        core.send(ovp.SessionResume, {"last_server_seq": 0}, 0)
    with pytest.raises(ovp.ProtocolError):
        core.send(ovp.AgentInput, {"source": "system", "text": "  "}, 0)
    assert core.next_seq == 0  # a refused event takes no seq


def test_client_audio_counters_and_outage() -> None:
    core = started_client()
    (sent,) = core.send_audio(memoryview(PCM), 1)
    assert isinstance(sent, SendBinary)
    first = ovp.decode_frame(sent.data, expected_direction=0)
    assert (first.frame_seq, first.rtp_timestamp, bytes(first.pcm)) == (0, 0, PCM)
    core.link_lost(2)
    assert core.send_audio(PCM, 2) == []  # lost: audio is never replayed
    core.connected(3)
    (sent,) = core.send_audio(bytearray(PCM), 3, flags=ovp.FLAG_SILENCE, rtp_timestamp=99)
    assert isinstance(sent, SendBinary)
    third = ovp.decode_frame(sent.data)
    assert (third.frame_seq, third.rtp_timestamp, third.silence) == (2, 99, True)
    with pytest.raises(ovp.ProtocolError):
        core.send_audio(PCM[:100], 3)


def test_client_handles_errors_by_their_recoverable_flag() -> None:
    core = started_client()
    out = core.receive_text(
        server_event("error", 1, code="OVP_SEQ_REGRESSION", message="m", recoverable=True), 1
    )
    assert of(ServerEvent, out) and not of(SessionOver, out) and core.live
    out = core.receive_text(
        server_event("error", 2, code="OVP_NEW_CODE", message="m", recoverable=False), 1
    )
    assert of(ServerEvent, out) and not of(SessionOver, out)  # session.end follows
    assert of(SessionOver, core.link_lost(2))[0].code == "OVP_NEW_CODE"  # no resume


def test_client_session_end_closes_with_1000() -> None:
    core = started_client()
    end = ovp.SessionEnd(
        seq=1,
        ts=MOMENT,
        session_id=SESSION,
        reason="error",
        error_code="OVP_LLM_UPSTREAM_FAILED",
        stats=NO_STATS,
    )
    out = core.receive_text(ovp.encode(end), 1)
    assert of(Close, out) == [Close(1000)]
    over = of(SessionOver, out)[0]
    assert over.end == end and over.code == "OVP_LLM_UPSTREAM_FAILED"
    assert of(Ignored, core.receive_text(thinking(2), 1))
    assert core.link_lost(2) == []


@pytest.mark.parametrize("code", ["OVP_AUTH_FAILED", "OVP_RESUME_EXPIRED"])
def test_client_refusals_end_the_session_at_once(code: str) -> None:
    core = ClientCore(SESSION, epoch=EPOCH)
    core.connected(0.0)
    out = core.receive_text(server_event("error", 0, code=code, message="no", recoverable=False), 0)
    assert of(ServerEvent, out) and of(SessionOver, out)[0].code == code


@pytest.mark.parametrize("code", ["OVP_AUTH_FAILED", "OVP_RESUME_EXPIRED"])
@pytest.mark.parametrize("seq", [0, 5, 6])
def test_a_refusal_on_a_resumed_link_is_never_a_duplicate(code: str, seq: int) -> None:
    core = started_client()
    core.receive_text(thinking(5), 0.2)
    core.link_lost(1.0)
    core.connected(2.0)  # session.resume with last_server_seq 5
    refusal = server_event("error", seq, code=code, message="refused", recoverable=False)
    out = core.receive_text(refusal, 2.1)
    assert [e.message.code for e in of(ServerEvent, out)] == [code]
    assert of(SessionOver, out)[0].code == code and core.state is ClientState.OVER
    assert core.last_server_seq == 5  # a refusal is outside the stream: it moves no seq
    with pytest.raises(SessionStateError):  # no further attempt: the session is over
        core.connected(3.0)


def test_client_drop_before_session_start_cannot_resume() -> None:
    core = ClientCore(SESSION, epoch=EPOCH)
    core.connected(0.0)
    assert of(SessionOver, core.link_lost(1.0))
    with pytest.raises(SessionStateError):
        core.connected(2.0)


def test_client_close_and_give_up() -> None:
    core = started_client()
    out = core.close()
    assert of(Close, out) == [Close(1000, "closed by the client")] and core.over is not None
    core = started_client()
    core.link_lost(1)
    assert of(SessionOver, core.give_up("gone"))[0].code == "OVP_RESUME_EXPIRED"


def test_client_closes_when_its_seq_would_pass_the_bound() -> None:
    core = started_client()
    core.skip_seq(ovp.MAX_SEQ)
    assert of(Sent, core.send(ovp.AgentInput, {"source": "system", "text": "x"}, 1))
    out = core.send(ovp.AgentInput, {"source": "system", "text": "x"}, 1)
    assert of(Close, out) and "seq would pass" in of(SessionOver, out)[0].detail
    assert core.over is not None and not core.live


def test_the_client_seq_skips_ahead_never_back_nor_past_the_bound() -> None:
    core = started_client()
    core.skip_seq(5)
    assert core.next_seq == 5
    for bad in (4, ovp.MAX_SEQ + 2):
        with pytest.raises(ValueError, match=rf"in 5\.\.{ovp.MAX_SEQ + 1}, not {bad}"):
            core.skip_seq(bad)
    core.skip_seq(ovp.MAX_SEQ + 1)
    out = core.send(ovp.AgentInput, {"source": "system", "text": "x"}, 1)
    assert of(Close, out) and not of(Sent, out)


def test_session_ids_are_path_segments() -> None:
    assert check_session_id("ovps_01HZK.a~b-c") == "ovps_01HZK.a~b-c"
    for bad in ("", "a/b", "a b", "x" * 129, "é"):
        with pytest.raises(ValueError, match="not an OVP session id"):
            check_session_id(bad)


def test_a_client_never_stitches_a_new_session_start_onto_a_resumed_session() -> None:
    core = started_client()
    core.receive_text(thinking(5), 0.2)
    assert of(Dropped, core.link_lost(1.0))
    assert [t["type"] for t in texts(core.connected(2.0))] == ["session.resume"]
    out = core.receive_text(start_event(), 2.1)  # a restarted gateway starts the session anew
    assert not of(ServerEvent, out)
    over = of(SessionOver, out)[0]
    assert over.code == "OVP_RESUME_EXPIRED" and "after seq 5 are lost" in over.detail
    assert Close(1000, "session lost") in out and core.state is ClientState.OVER
    assert core.receive_text(thinking(6), 2.2) == [Ignored("a text message while over")]
