"""The demo agent of ``voxwire demo --browser`` without a browser: its energy rule at every bound,
one turn and a barge-in played by the Python client against the softphone's own server (the
session's capture judged clean by ``voxwire validate``), and the server's HTTP paths."""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import struct
import time
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.test_ovp_support import run
from tests.timing import Lateness
from voxwire import ovp
from voxwire.capture import CaptureWriter
from voxwire.clock import ScaledClock
from voxwire.demo.softphone import TENANT, Softphone
from voxwire.demo.speech import (
    END_SILENCE_FRAMES,
    MIN_SPEECH_FRAMES,
    SPEECH_DBFS,
    SpeechDetector,
    SpeechStarted,
    Utterance,
    level_dbfs,
)
from voxwire.demo.voice_agent import answer_text, voice
from voxwire.ovp.client import OVPClient
from voxwire.validate import Tally, check_capture

SPEED = 5
"""How much faster than real time the calls run."""
# The constant sample value whose level is SPEECH_DBFS, rounded down: 184 is below, 185 at it.
THRESHOLD_VALUE = math.floor(32768 * 10 ** (SPEECH_DBFS / 20))


def frame(value: int, seq: int, flags: int = 0) -> ovp.AudioFrame:
    """A frame of constant samples (its RMS level is ``value``)."""
    return ovp.AudioFrame(
        direction=ovp.FrameDirection.CLIENT_TO_SERVER,
        frame_seq=seq,
        rtp_timestamp=seq * ovp.SAMPLES_PER_FRAME,
        flags=flags,
        pcm=struct.pack(f"<{ovp.SAMPLES_PER_FRAME}h", *[value] * ovp.SAMPLES_PER_FRAME),
    )


def feed(detector: SpeechDetector, values: list[int], start: int = 0) -> list[Any]:
    """Feed one frame a value; what came out, with the index of the frame that said it."""
    said = []
    for index, value in enumerate(values, start):
        out = detector.feed(frame(value, index), now=index * 0.02)
        if out is not None:
            said.append((index, out))
    return said


def test_a_frame_is_voiced_from_the_threshold_on() -> None:
    assert level_dbfs(frame(THRESHOLD_VALUE + 1, 0).pcm) >= SPEECH_DBFS
    assert level_dbfs(frame(THRESHOLD_VALUE, 0).pcm) < SPEECH_DBFS
    assert level_dbfs(bytes(640)) == -math.inf
    loud, quiet = THRESHOLD_VALUE + 1, THRESHOLD_VALUE
    assert feed(SpeechDetector(), [loud] * MIN_SPEECH_FRAMES)[-1][0] == MIN_SPEECH_FRAMES - 1
    assert feed(SpeechDetector(), [quiet] * 200) == []


def test_speech_starts_after_min_speech_frames_and_shorter_bursts_are_forgotten() -> None:
    loud = 3000
    short = feed(SpeechDetector(), [loud] * (MIN_SPEECH_FRAMES - 1) + [0] * END_SILENCE_FRAMES)
    assert short == []  # a click or a cough: no speech, no utterance
    said = feed(SpeechDetector(), [loud] * MIN_SPEECH_FRAMES + [0] * END_SILENCE_FRAMES)
    assert [type(out) for _, out in said] == [SpeechStarted, Utterance]
    assert said[0] == (MIN_SPEECH_FRAMES - 1, SpeechStarted(started_at=0.0))


def test_an_utterance_ends_after_end_silence_frames_and_not_one_before() -> None:
    loud = 3000
    detector = SpeechDetector()
    voiced = [loud] * 20
    # Two words with a pause one frame short of the end between them: one utterance.
    said = feed(detector, voiced + [0] * (END_SILENCE_FRAMES - 1) + voiced)
    assert [type(out) for _, out in said] == [SpeechStarted] and detector.speaking
    start = len(voiced) * 2 + END_SILENCE_FRAMES - 1
    said = feed(detector, [0] * END_SILENCE_FRAMES, start)
    [(index, utterance)] = said
    assert index == start + END_SILENCE_FRAMES - 1 and not detector.speaking
    assert isinstance(utterance, Utterance)
    assert utterance.voiced_frames == 40 and utterance.speech_ms == 800
    assert (utterance.first_frame_seq, utterance.last_frame_seq) == (0, start - 1)
    assert utterance.ended_at == pytest.approx((start - 1) * 0.02)
    assert utterance.peak_dbfs == pytest.approx(20 * math.log10(loud / 32768))


def test_the_clients_last_of_utterance_flag_ends_it_at_once() -> None:
    detector = SpeechDetector()
    feed(detector, [3000] * MIN_SPEECH_FRAMES)
    out = detector.feed(frame(0, 99, flags=ovp.FLAG_LAST_OF_UTTERANCE), now=2.0)
    assert isinstance(out, Utterance) and out.voiced_frames == MIN_SPEECH_FRAMES
    assert detector.voiced_frames == 0


def test_the_voice_is_one_tone_a_word_in_whole_frames() -> None:
    pcm = voice(3)
    assert len(pcm) % ovp.PCM_BYTES_PER_FRAME == 0
    assert len(pcm) == 3 * 9 * ovp.PCM_BYTES_PER_FRAME
    assert max(abs(s) for s in struct.unpack(f"<{len(pcm) // 2}h", pcm)) <= 8000


def tone(seconds: float, hz: float = 300.0, volume: int = 6000) -> bytes:
    count = round(seconds * ovp.SAMPLE_RATE_HZ)
    return struct.pack(
        f"<{count}h",
        *(
            round(volume * math.sin(2 * math.pi * hz * n / ovp.SAMPLE_RATE_HZ))
            for n in range(count)
        ),
    )


def _get(url: str, path: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """A plain HTTP GET on the softphone's port."""
    address = url.removeprefix("http://").rstrip("/")
    connection = http.client.HTTPConnection(address, timeout=5)
    try:
        headers = {} if host is None else {"Host": host}
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.headers), response.read()
    finally:
        connection.close()


async def _session(softphone: Softphone) -> tuple[str, str, str]:
    status, _, body = await asyncio.to_thread(_get, softphone.url, "/session")
    assert status == 200
    grant = json.loads(body)
    return grant["url"], grant["sessionId"], grant["token"]


WORDS = len(answer_text(Utterance(0.0, 0.0, 30, 0, 0, 0.0)).split(" "))
TURN_EVENTS = [
    ovp.TranscriptFinal.type,
    *[ovp.AgentThinking.type] * WORDS,
    ovp.AgentOutput.type,
    ovp.AudioEgress.type,
    ovp.AudioEgress.type,
    ovp.AgentLatencyBreakdown.type,
]
"""What one answer sends, in order (audio.ingress and the partials come as the caller speaks)."""


def test_one_turn_speech_in_transcripts_and_agent_audio_out(tmp_path: Path) -> None:
    seen: list[Any] = []
    late_ms: list[float] = []

    async def call() -> int:
        clock = ScaledClock(SPEED)
        capture = CaptureWriter(tmp_path / "call.jsonl", protocol="ovp", recorded_by="server")
        began = time.monotonic()
        async with Lateness() as late, Softphone(clock=clock, record=capture) as softphone:
            url, session_id, token = await _session(softphone)
            client = OVPClient(url, session_id, token, clock=clock)
            try:
                await client.connect()
                await client.stream_audio(tone(0.6) + bytes(32000), last_of_utterance=False)
                async for event in client:
                    if not isinstance(event, ovp.CallQualityUpdate | ovp.AgentCostTick):
                        seen.append(event)
                    if isinstance(event, ovp.AgentLatencyBreakdown):
                        break
                # The frames came before the events that follow them (one socket, in order).
                assert client.audio_lost == 0
                frames = len(client.audio())
            finally:
                await client.close()
            # How late the loop of both sides ran, on the call's clock (the pacing, the turn).
            late_ms.append(SPEED * 1000 * late.allowance(began, time.monotonic(), hops=4))
        capture.close()
        return frames

    frames = run(call(), timeout=30)
    types = [event.type for event in seen]
    first = types.index(ovp.TranscriptFinal.type)
    # Speech started at its 10th frame (a partial), the window of its first 50 frames acked.
    assert types[:2] == [ovp.SessionStart.type, ovp.TranscriptPartial.type], types
    assert ovp.AudioIngress.type in types[:first]
    assert types[first:] == TURN_EVENTS
    final = seen[first]
    assert final.speaker == ovp.Speaker.CALLER and final.utterance_id == "utt_1"
    assert final.text.startswith("[0.6 s of speech")
    output = next(e for e in seen if isinstance(e, ovp.AgentOutput))
    assert output.text == answer_text(Utterance(0, 0, 30, 0, 0, 0)) and output.final
    assert frames == len(voice(WORDS)) // ovp.PCM_BYTES_PER_FRAME
    egress = [e for e in seen if isinstance(e, ovp.AudioEgress)]
    assert egress[-1].final and egress[-1].bytes_sent == frames * ovp.PCM_BYTES_PER_FRAME
    latency = seen[-1]
    # The end of speech is known END_SILENCE_FRAMES later (give or take the frames' arrival
    # jitter), and the answer follows at once.
    hangover, [late] = END_SILENCE_FRAMES * ovp.FRAME_MS, late_ms
    assert hangover - 2 * ovp.FRAME_MS <= latency.stt_final_ms <= hangover + 50 + late, latency
    assert latency.stt_final_ms <= latency.total_turn_ms <= latency.stt_final_ms + 50 + late
    tally = Tally()
    with (tmp_path / "call.jsonl").open("rb") as lines:
        _, findings = check_capture(lines, tally)
        assert list(findings) == []
    assert tally.violations == 0 and tally.frames > 0


def test_speaking_over_the_agent_cuts_its_audio_and_is_answered() -> None:
    seen: list[Any] = []

    async def call() -> None:
        clock = ScaledClock(SPEED)
        async with Softphone(clock=clock) as softphone:
            url, session_id, token = await _session(softphone)
            client = OVPClient(url, session_id, token, clock=clock)
            try:
                await client.connect()
                await client.stream_audio(tone(0.6) + bytes(32000), last_of_utterance=False)
                async for event in client:
                    seen.append(event)
                    if isinstance(event, ovp.AgentOutput) and event.turn_id == "turn_1":
                        # Its audio follows at once: speak over it.
                        await client.stream_audio(tone(0.4), last_of_utterance=True)
                    if isinstance(event, ovp.AgentLatencyBreakdown):
                        break
            finally:
                await client.close()

    run(call(), timeout=30)
    barge_in = next(e for e in seen if isinstance(e, ovp.AgentBargeIn))
    flush = seen[seen.index(barge_in) + 1]
    assert isinstance(flush, ovp.AudioFlush)
    assert flush.cause == ovp.FlushCause.BARGE_IN and flush.turn_id == barge_in.turn_id == "turn_1"
    assert barge_in.played_bytes == barge_in.played_ms * 32 > 0
    # Turn 1 never finished; turn 2 answered the second utterance whole.
    assert not [
        e for e in seen if isinstance(e, ovp.AudioEgress) and e.turn_id == "turn_1" and e.final
    ]
    assert seen[-1].turn_id == "turn_2"
    finals = [e for e in seen if isinstance(e, ovp.TranscriptFinal)]
    assert [e.utterance_id for e in finals] == ["utt_1", "utt_2"]


def test_the_site_serves_the_page_and_mints_tokens_for_loopback_pages_only() -> None:
    async def probe() -> dict[str, Any]:
        async with Softphone() as softphone:
            port = softphone.gateway.port

            async def get(path: str, host: str | None = None) -> Any:
                return await asyncio.to_thread(_get, softphone.url, path, host)

            paths = ("/", "/softphone.js", "/healthz", "/metrics", "/x")
            answers = {path: await get(path) for path in paths}
            grant = json.loads((await get("/session"))[2])
            answers["grant"] = grant
            answers["token"] = await get(f"/token?session={grant['sessionId']}")
            answers["unknown"] = await get("/token?session=ovps_elsewhere")
            for name, host in [
                ("localhost", f"localhost:{port}"),
                ("ipv6", "[::1]"),
                ("rebound", f"evil.example:{port}"),
                ("suffix", "127.0.0.1.evil.example"),
                ("broken", "[::1"),
                ("path", "127.0.0.1:80/evil"),
                ("user", "evil@127.0.0.1"),
                ("bad port", "127.0.0.1:x"),
                ("none", ""),
            ]:
                answers[name] = await get("/session", host)
            answers["port"] = port
            return answers

    answers = run(probe(), timeout=20)
    status, headers, body = answers["/"]
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert b'<script type="module" src="/softphone.js">' in body
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert headers["Cache-Control"] == "no-store"
    assert answers["/softphone.js"][0] == 200
    assert answers["/softphone.js"][1]["Content-Type"] == "text/javascript; charset=utf-8"
    assert answers["/healthz"][0] == 200 and answers["/x"][0] == 404
    assert answers["/metrics"][0] == 200 and b"voxwire_" in answers["/metrics"][2]
    grant = answers["grant"]
    assert grant["url"].startswith("ws://127.0.0.1:") and grant["sessionId"].startswith("ovps_")
    fresh = json.loads(answers["token"][2])["token"]
    for token in (grant["token"], fresh):
        claims = jwt.decode(token, options={"verify_signature": False})
        assert claims["session_id"] == grant["sessionId"] and claims["tenant_id"] == TENANT
    assert answers["unknown"][0] == 404
    assert answers["localhost"][0] == answers["ipv6"][0] == 200
    # The gateway is the page's own origin, under the name the page used.
    assert json.loads(answers["localhost"][2])["url"] == f"ws://localhost:{answers['port']}"
    assert json.loads(answers["ipv6"][2])["url"] == "ws://[::1]"
    for refused in ("rebound", "suffix", "broken", "path", "user", "bad port", "none"):
        assert answers[refused][0] == 403, refused
