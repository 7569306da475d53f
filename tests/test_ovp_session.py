"""Whole OVP sessions over loopback: events and audio both ways, errors, updates, the end."""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from tests.test_ovp_handshake import accept_any, echoing
from tests.test_ovp_support import (
    AGENT,
    CALL,
    MOMENT,
    NO_STATS,
    PCM,
    SESSION,
    collecting,
    endpoint,
    event,
    eventually,
    fast_clock,
    next_event,
    ovp_client,
    raw_connect,
    run,
    serving,
    token,
)
from voxwire import ovp
from voxwire.ovp.client import OVPClient, SessionFailed
from voxwire.ovp.gateway import GatewaySession


def transcript(session: GatewaySession, text: str) -> ovp.TranscriptFinal:
    return session.send_transcript_final(
        utterance_id="utt_1",
        speaker=ovp.Speaker.CALLER,
        language="en-US",
        text=text,
        confidence=0.9,
        words=[],
    )


def frame_bytes(direction: int, frame_seq: int) -> bytes:
    return struct.pack("<BBHII", 1, 0, direction, frame_seq, 0) + PCM


# ----------------------------------------------------------------------------- a whole call


def test_a_whole_call_with_events_and_audio_both_ways() -> None:
    got: list[ovp.ClientMessage | ovp.AudioFrame] = []

    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        frames = 0
        async for item in session:
            got.append(item)
            if isinstance(item, ovp.AudioFrame):
                session.send_audio(item.pcm)  # echo, zero-copy
                frames += 1
                if frames % 10 == 0:
                    transcript(session, f"heard {frames} frames")
                if frames == 30:
                    session.end(ovp.SessionEndReason.CALLER_HANGUP)

    async def main() -> None:
        async with serving(handler, clock=fast_clock()) as gateway:
            client = ovp_client(gateway.url, gateway.clock)
            finals: list[str] = []
            seen: list[int] = []
            client.on("transcript.final", lambda e: finals.append(e.text))

            async def every(message: Any) -> None:
                seen.append(message.seq)

            for kind in ("session.start", "transcript.final", "session.end"):
                client.on(kind, every)  # an awaitable handler runs as a task, in arrival order
            start = await client.connect()
            assert start.agent.name == AGENT.name and start.call.from_ == CALL.from_
            sent = await client.send_agent_input(source=ovp.InputSource.SYSTEM, text="Be kind.")
            assert sent.seq == 0
            await client.send_dtmf(digits="12#")
            await client.stream_audio(memoryview(PCM * 30))
            echoed: list[ovp.AudioFrame] = []

            async def listen() -> None:
                async for frame in client.audio():
                    echoed.append(frame)

            listener = asyncio.create_task(listen())
            end = await client.run()
            await listener
            assert end is not None and end.reason == "caller_hangup"
            assert end.stats.client_frames == 30 and end.stats.server_frames == 30
            assert finals == ["heard 10 frames", "heard 20 frames", "heard 30 frames"]
            assert seen == list(range(5))  # start, 3 transcripts, end: every seq once
            assert [f.frame_seq for f in echoed] == list(range(30))
            assert all(bytes(f.pcm) == PCM and f.direction == 1 for f in echoed)
            assert [f.rtp_timestamp for f in echoed[:3]] == [0, 320, 640]
            await client.close()

    run(main())
    events = [item for item in got if not isinstance(item, ovp.AudioFrame)]
    assert [(e.type, e.seq) for e in events] == [("agent.input", 0), ("dtmf.send", 1)]
    frames = [item for item in got if isinstance(item, ovp.AudioFrame)]
    assert [f.frame_seq for f in frames] == list(range(30))
    assert frames[-1].last_of_utterance and not frames[0].last_of_utterance


def test_session_end_is_followed_by_close_1000() -> None:
    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        session.end(ovp.SessionEndReason.AGENT_ENDED)

    async def main() -> tuple[list[str], int | None]:
        async with serving(handler) as gateway:
            ws = await raw_connect(endpoint(gateway))
            types = [(await next_event(ws))["type"], (await next_event(ws))["type"]]
            with pytest.raises(ConnectionClosed):
                await next_event(ws)
            return types, ws.close_code

    assert run(main()) == (["session.start", "session.end"], 1000)


def test_a_handler_that_returns_ends_the_session() -> None:
    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)

    async def main() -> ovp.SessionEnd | None:
        async with serving(handler) as gateway:
            client = OVPClient(gateway.url, SESSION, token())
            await client.connect()
            return await client.run()

    end = run(main())
    assert end is not None and end.reason == "agent_ended"


# ----------------------------------------------------------------------------- errors the gateway sends


def test_the_gateway_answers_every_bad_client_event_and_frame_and_keeps_the_link() -> None:
    got: list[ovp.ClientMessage | ovp.AudioFrame] = []

    async def main() -> list[dict[str, Any]]:
        async with serving(collecting(got), accept_patch=lambda p: "no such voice") as gateway:
            ws = await raw_connect(endpoint(gateway))
            assert (await next_event(ws))["type"] == "session.start"
            answers = []
            for data in [
                "{not json",
                event("agent.input", 0, source="shout", text="x"),
                event("agent.thinking", 0, turn_id="t", delta="x"),
                event("dtmf.send", 0, "ovps_someone_else", digits="1"),
                event("session.update", 0, patch={}),
                event("session.update", 0, patch={"tools": []}),
                event("session.update", 0, patch={"voice_id": "v9"}),
            ]:
                await ws.send(data)
                answers.append(await next_event(ws))
            for seq in (0, 1, 2):
                await ws.send(event("dtmf.send", seq, digits="1"))
            await ws.send(event("dtmf.send", 0, digits="9"))  # a client restarting its seq
            answers.append(await next_event(ws))
            await ws.send(frame_bytes(0, 0))
            await ws.send(frame_bytes(1, 1))  # a client frame must say client-to-server
            answers.append(await next_event(ws))
            await ws.send(frame_bytes(0, 0))  # frame_seq did not advance
            answers.append(await next_event(ws))
            await ws.send(b"\x01" * 100)  # a binary message is always a frame
            await ws.send(event("dtmf.send", 3, digits="2"))  # the link is still good
            await eventually(lambda: len(got) == 5)
            await ws.close()
            return answers

    answers = run(main())
    assert [a["code"] for a in answers] == [
        "OVP_EVENT_SCHEMA_INVALID",
        "OVP_EVENT_SCHEMA_INVALID",
        "OVP_EVENT_DIRECTION_VIOLATION",
        "OVP_EVENT_SCHEMA_INVALID",
        "OVP_SESSION_UPDATE_REJECTED",
        "OVP_SESSION_UPDATE_REJECTED",
        "OVP_SESSION_UPDATE_REJECTED",
        "OVP_SEQ_REGRESSION",
        "OVP_AUDIO_FRAME_INVALID",
        "OVP_SEQ_REGRESSION",
    ]
    assert all(a["recoverable"] is True and a["type"] == "error" for a in answers)
    assert [a["seq"] for a in answers] == list(range(1, 11))
    assert answers[6]["message"] == "no such voice"
    assert answers[7]["details"] == {"event_seq": 0, "event_type": "dtmf.send"}
    assert answers[8]["details"] == {"dropped_frames": 1}
    kinds = [
        (g.type, g.seq) if not isinstance(g, ovp.AudioFrame) else ("frame", g.frame_seq)
        for g in got
    ]
    assert kinds == [
        ("dtmf.send", 0),
        ("dtmf.send", 1),
        ("dtmf.send", 2),
        ("frame", 0),
        ("dtmf.send", 3),
    ]


def test_session_update_applied_or_rejected_through_the_client() -> None:
    async def main() -> None:
        def judge(patch: ovp.SessionPatch) -> str | None:
            return "unsupported language" if patch.language == "tlh" else None

        seen: list[ovp.ClientMessage | ovp.AudioFrame] = []
        async with serving(collecting(seen), accept_patch=judge) as gateway:
            client = OVPClient(gateway.url, SESSION, token())
            await client.connect()
            await client.send_session_update(patch=ovp.SessionPatch(voice_id="v2", speech_rate=0.8))
            await client.send_session_update(patch=ovp.SessionPatch(language="tlh"))
            async for message in client:
                if message.type == "error":
                    assert isinstance(message, ovp.ErrorEvent)
                    assert message.code == "OVP_SESSION_UPDATE_REJECTED" and message.recoverable
                    assert message.details == {"event_seq": 1, "event_type": "session.update"}
                    break
            session = gateway.sessions[SESSION]
            assert session.agent is not None
            assert (session.agent.voice_id, session.agent.speech_rate) == ("v2", 0.8)
            assert session.agent.language == "en-US"
            assert [m.type for m in seen if not isinstance(m, ovp.AudioFrame)] == ["session.update"]
            await client.close()

    run(main())


# ----------------------------------------------------------------------------- errors the client receives

FATAL = [
    code
    for code, recoverable in ovp.RECOVERABLE.items()
    if not recoverable
    and code not in ("OVP_AUTH_FAILED", "OVP_RESUME_EXPIRED", "OVP_SUBPROTOCOL_MISMATCH")
]


@pytest.mark.parametrize("code", FATAL)
def test_the_client_takes_a_fatal_error_then_session_end(code: str) -> None:
    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        session.fail(code, "it broke", details={"upstream_status": 503})

    async def main() -> tuple[list[ovp.ServerMessage], ovp.SessionEnd | None]:
        async with serving(handler) as gateway:
            client = OVPClient(gateway.url, SESSION, token())
            await client.connect()
            received = [message async for message in client]
            return received, client.session_end

    received, end = run(main())
    start, error, last = received
    assert start.type == "session.start"
    assert isinstance(error, ovp.ErrorEvent) and error.code == code and error.recoverable is False
    assert error.details == {"upstream_status": 503}
    assert isinstance(last, ovp.SessionEnd) and last == end and last.error_code == code


@pytest.mark.parametrize(
    "code",
    [code for code, recoverable in ovp.RECOVERABLE.items() if recoverable and "TOOL" not in code],
)
def test_the_client_goes_on_after_a_recoverable_error(code: str) -> None:
    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        session.fail(code, "dropped one")
        session.fail("ACME_SLOW_DOWN", "a code this client does not know", recoverable=True)
        transcript(session, "still here")
        session.end()

    async def main() -> list[str]:
        async with serving(handler) as gateway:
            client = OVPClient(gateway.url, SESSION, token())
            await client.connect()
            return [getattr(m, "code", m.type) async for m in client]

    assert run(main()) == [
        "session.start",
        code,
        "ACME_SLOW_DOWN",
        "transcript.final",
        "session.end",
    ]


def test_the_client_receives_the_tool_codes_on_agent_tool_error() -> None:
    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        for call_id, code in [("c1", "OVP_TOOL_UNKNOWN"), ("c2", "OVP_TOOL_ARGS_INVALID")]:
            session.send_agent_tool_invoke(
                turn_id="t1", tool_call_id=call_id, name="lookup", arguments={}
            )
            session.send_agent_tool_error(
                turn_id="t1",
                tool_call_id=call_id,
                code=code,
                message="refused",
                retryable=False,
            )
        session.end()

    async def main() -> list[str]:
        async with serving(handler) as gateway:
            client = OVPClient(gateway.url, SESSION, token())
            await client.connect()
            return [m.code async for m in client if isinstance(m, ovp.AgentToolError)]

    assert run(main()) == ["OVP_TOOL_UNKNOWN", "OVP_TOOL_ARGS_INVALID"]


def test_a_failing_handler_is_an_internal_error() -> None:
    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        raise RuntimeError("application bug")

    async def main() -> ovp.SessionEnd | None:
        async with serving(handler) as gateway:
            client = OVPClient(gateway.url, SESSION, token())
            await client.connect()
            return await client.run()

    end = run(main())
    assert end is not None and end.reason == "error" and end.error_code == "OVP_INTERNAL_ERROR"


# ----------------------------------------------------------------------------- the 5 s helpers


def test_quality_and_cost_every_five_seconds_from_the_applications_values() -> None:
    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        session.set_quality(packet_loss_pct=0.2, jitter_ms=4.1, rtt_ms=38, mos=4.3)
        session.set_cost(
            ovp.CostBreakdown(
                llm_usd_micros=10,
                stt_usd_micros=20,
                tts_usd_micros=30,
                voice_termination_usd_micros=40,
            )
        )
        async for _ in session:
            pass

    async def main() -> list[ovp.ServerMessage]:
        clock = fast_clock()
        async with serving(handler, clock=clock) as gateway:
            client = ovp_client(gateway.url, clock)
            await client.connect()
            received = []
            async for message in client:
                received.append(message)
                if len(received) == 7:  # start and three 5 s rounds of two
                    break
            await client.close()
            return received

    received = run(main())
    quality = [m for m in received if isinstance(m, ovp.CallQualityUpdate)]
    cost = [m for m in received if isinstance(m, ovp.AgentCostTick)]
    assert len(quality) == 3 and len(cost) == 3
    assert quality[0].mos == 4.3 and cost[0].total_cost_usd_micros == 100
    assert [m.seq for m in received] == list(range(7))


# ----------------------------------------------------------------------------- a gateway that misbehaves


def fake_gateway(*messages: str | bytes) -> Any:
    async def handler(ws: ServerConnection) -> None:
        for message in messages:
            await ws.send(message)
        await ws.wait_closed()

    return serve(
        handler,
        "127.0.0.1",
        0,
        process_request=accept_any,
        process_response=echoing(ovp.SUBPROTOCOL),
    )


def start_json(**changes: Any) -> str:
    start = ovp.SessionStart(
        seq=0,
        ts=MOMENT,
        session_id=SESSION,
        protocol_version="1.0",
        call=CALL,
        agent=AGENT,
        audio=ovp.AudioFormat(sample_rate_hz=16000, sample_width_bits=16, channels=1, frame_ms=20),
    )
    data = json.loads(ovp.encode(start))
    data.update(changes)
    return json.dumps(data)


def test_the_client_drops_bad_server_messages_and_goes_on() -> None:
    end = ovp.SessionEnd(
        seq=3,
        ts=MOMENT,
        session_id=SESSION,
        reason="caller_hangup",
        stats=NO_STATS,
    )
    messages: list[str | bytes] = [
        start_json(),
        '{"type": "transcript.final"',
        event("agent.thinking", 1, "ovps_other", turn_id="t", delta="x"),
        event("agent.input", 1, source="system", text="x"),  # a client-only event
        frame_bytes(0, 0),  # a frame must say server-to-client
        event("agent.thinking", 1, turn_id="t", delta="ok"),
        frame_bytes(1, 0),
        event("agent.thinking", 1, turn_id="t", delta="replayed twice"),
        event("agent.vibe", 2, vibe="good"),
        ovp.encode(end).decode(),
    ]

    async def main() -> tuple[list[str], OVPClient]:
        async with fake_gateway(*messages) as server:
            port = server.sockets[0].getsockname()[1]
            client = OVPClient(f"ws://127.0.0.1:{port}", SESSION, token())
            await client.connect()
            types: list[str] = [m.type async for m in client]
            return types, client

    types, client = run(main())
    assert types == ["session.start", "agent.thinking", "session.end"]
    assert client.rejected == 4 and client.ignored == 2  # a replayed duplicate, an unknown type


@pytest.mark.parametrize(
    ("first", "detail"),
    [
        (event("agent.thinking", 0, turn_id="t", delta="x"), "before session.start"),
        (start_json(seq=1), "not 0"),
        (
            start_json(
                audio={
                    "sample_rate_hz": 8000,
                    "sample_width_bits": 16,
                    "channels": 1,
                    "frame_ms": 20,
                }
            ),
            "sample_rate_hz",
        ),
        (start_json(protocol_version="2.0"), "protocol_version"),
    ],
)
def test_the_client_fails_on_a_gateway_that_does_not_start_properly(
    first: str, detail: str
) -> None:
    async def main() -> None:
        async with fake_gateway(first) as server:
            port = server.sockets[0].getsockname()[1]
            client = OVPClient(f"ws://127.0.0.1:{port}", SESSION, token())
            with pytest.raises(SessionFailed, match=detail) as failed:
                await client.connect()
            assert failed.value.code == "OVP_EVENT_SCHEMA_INVALID"

    run(main())


def test_a_client_that_hangs_up_leaves_the_session_resumable() -> None:
    async def main() -> None:
        async with serving(collecting([])) as gateway:
            client = OVPClient(gateway.url, SESSION, token())
            await client.connect()
            await client.close()
            assert client.over is not None and client.over.end is None
            assert [m.type async for m in client] == ["session.start"]  # no failure raised
            with pytest.raises(SessionFailed):
                await client.send_dtmf(digits="1")
            session = gateway.sessions[SESSION]
            await eventually(lambda: not session.connected)
            assert session.over is None

    run(main())


def test_stream_audio_paces_frames_at_20_ms_behind_a_bounded_queue() -> None:
    arrivals: list[float] = []

    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        async for item in session:
            if isinstance(item, ovp.AudioFrame):
                arrivals.append(asyncio.get_running_loop().time())

    async def main() -> float:
        async with serving(handler) as gateway:
            client = ovp_client(gateway.url, audio_buffer=5)
            await client.connect()
            loop = asyncio.get_running_loop()
            began = loop.time()
            await client.stream_audio(bytes(640 * 15 + 100))  # 16 frames, the last one padded
            queued_for = loop.time() - began  # it waited while 5 frames were queued
            await client.drain_audio()
            await eventually(lambda: len(arrivals) == 16)
            await client.close()
            return queued_for

    queued_for = run(main())
    span = arrivals[-1] - arrivals[0]
    assert 0.25 <= span < 0.6  # 15 intervals of 20 ms
    assert queued_for >= 0.15  # 16 frames through a queue of 5: about 10 had to leave first


def test_on_takes_only_the_types_the_other_side_sends() -> None:
    async def main() -> None:
        async with serving(collecting([])) as gateway:
            client = ovp_client(gateway.url)
            with pytest.raises(ValueError, match=r"'transcript\.finall' is not a message type"):
                client.on("transcript.finall", print)  # type: ignore[call-overload]
            with pytest.raises(ValueError, match=r"the client sends 'agent\.input'"):
                client.on("agent.input", print)  # type: ignore[call-overload]
            await client.connect()
            session = gateway.sessions[SESSION]
            with pytest.raises(ValueError, match=r"the gateway sends 'agent\.output'"):
                session.on("agent.output", print)  # type: ignore[call-overload]
            await client.close()

    run(main())


def test_typed_sends_refuse_a_misspelled_field_at_run_time_too() -> None:
    async def main() -> None:
        async with serving(collecting([])) as gateway:
            client = ovp_client(gateway.url)
            await client.connect()
            session = gateway.sessions[SESSION]
            with pytest.raises(TypeError, match="finall"):
                session.send_agent_output(turn_id="t", text="x", finall=True)  # type: ignore[call-arg]
            with pytest.raises(TypeError, match="txt"):
                await client.send_agent_input(txt="hi", source="system")  # type: ignore[call-arg]
            sent = session.send_agent_output(turn_id="t", text="x", final=True)
            assert isinstance(sent, ovp.AgentOutput) and sent.seq == 1
            await client.close()

    run(main())
