"""voxwire/audio in headless Chromium against the Python Gateway, at AudioContext rates of 44.1
and 48 kHz: a known tone file is the fake microphone (``--use-file-for-fake-audio-capture``),
``startCapture`` sends it, the gateway echoes it, ``startPlayback`` plays the echo, and the
gateway then cuts the agent's audio with a barge-in.

Always judged: the gateway receives every frame 640 bytes, ``frame_seq`` without a gap and
``rtp_timestamp`` 320 a frame made; the capture's sends are never two within
``CAPTURE_MIN_GAP_MS``; what the gateway receives is the tone resampled to 16 kHz (one fit of
the two tones over the whole stream, each sample at its media clock, leaves a residual under
``CAPTURED_TOLERANCE``), unless what the capture's worklet itself got was broken (Chromium's
capture path drops samples on a loaded machine: the test taps the same node and says so); after
the barge-in the output is silent, and the frames the player held were dropped.

Judged when the run had real time (``QUIET_MS``): no restart or overflow of the capture's
schedule, 50 frames a second at the gateway, sends within ``CAPTURE_RESTART_MS`` of one 20 ms
grid; the echo plays with no gap once warmed up (no concealment, no underrun, one fit of the
tones over the whole output up to the barge-in). A run without is said in a warning.
"""

from __future__ import annotations

import base64
import itertools
import math
import time
import urllib.parse
import warnings
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.browser import chromium_page, serve_folder
from tests.conftest import ROOT
from tests.node import consumer
from tests.test_ovp_support import AGENT, CALL, SESSION, run, serving, token
from voxwire import ovp
from voxwire.ovp.gateway import GatewaySession

TONES = ((440.0, 12000), (1250.0, 6000))
"""The fake microphone: two tones (Hz, PCM16 amplitude), whole cycles in every second."""
FILE_RATE = 44100
FILE_SECONDS = 8
ECHOED = 100
"""Frames the gateway echoes (2 s); then the barge-in."""
TOTAL = 150
"""Frames the gateway takes before it ends the session (1 s of silence after the barge-in)."""
BURST = 6
"""Frames of agent audio the gateway sends just before the barge-in: held, never heard."""
CAPTURED_TOLERANCE = 2e-4
"""Largest difference between the received 16 kHz audio and the fitted tones (full scale 1):
Chromium's capture path, the resampler's passband and PCM16 rounding (1.5e-5) stay well under
it; one sample lost or repeated anywhere in the stream leaves 1e-2."""
COARSE_MS = 0.5
"""What the page's clock may be off by (Chromium coarsens performance.now() to 0.1 ms)."""
RAW_TOLERANCE = 1e-4
"""The same for what the capture's worklet got, at the context's rate (the fake device scales
its PCM16 by 1/32767, and converts 44.1 kHz to 48 kHz: about 4e-5)."""
PLAYED_TOLERANCE = 4e-4
"""The same for the played echo, resampled twice and rounded to PCM16 on the way: the images the
16 kHz to 44.1 or 48 kHz filter leaves (at about -66 dB of the tones, 1.9e-4) stay under it."""
WARM_UP_MS = 100
"""What the judging of the audio leaves out after the tone first sounds: Chromium's fake device
starts with a blip and a few milliseconds of silence before the file plays."""
QUIET_MS = 30
"""A run whose page stalled, or whose echo's way varied, by more than this is too loaded to be
held to the real-time bounds (no restart, no concealment, a gap-free echo): the jitter buffer
absorbs about (PLAYBACK_TARGET_FRAMES - 1) * FRAME_MS = 40 ms. Everything else is judged always."""
SILENCE_AFTER_FLUSH_S = 0.02
"""How long after the barge-in reached the page the output may still sound: the flush message's
way to the audio thread (a render quantum is 2.7 ms)."""
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><link rel="icon" href="data:,">
<script type="importmap">{"imports": {
  "voxwire/ovp": "/node_modules/voxwire/dist/ovp/index.js",
  "voxwire/ovp/client": "/node_modules/voxwire/dist/ovp/client.js",
  "voxwire/audio": "/node_modules/voxwire/dist/audio/index.js"
}}</script></head>
<body><script type="module">
import { runAudio } from "/out/audio_page.js";
const query = new URLSearchParams(location.search);
runAudio({ url: query.get("url"), sessionId: query.get("session"), token: query.get("token"),
           rate: Number(query.get("rate")) })
  .then((result) => { window.result = result; }, (error) => { window.result = { error: String(error) }; });
</script></body></html>
"""


@pytest.fixture(scope="module")
def site() -> Path:
    project = consumer()
    project.compile(ROOT / "tests" / "typescript" / "audio_page.ts")
    (project.root / "audio.html").write_text(PAGE)
    return project.root


@pytest.fixture(scope="module")
def tone_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fake-microphone") / "tones.wav"
    t = np.arange(FILE_RATE * FILE_SECONDS) / FILE_RATE
    pcm = sum(a * np.sin(2 * np.pi * f * t) for f, a in TONES)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(FILE_RATE)
        out.writeframes(np.round(pcm).astype("<i2").tobytes())
    return path


def fit(samples: np.ndarray, t: np.ndarray) -> tuple[list[float], float]:
    """Least squares of the two tones (amplitude and phase free) and a constant, each sample at
    its time ``t`` (seconds): the amplitudes found and the largest residual."""
    columns = [np.ones_like(t)]
    for f, _ in TONES:
        columns += [np.sin(2 * np.pi * f * t), np.cos(2 * np.pi * f * t)]
    basis = np.stack(columns, axis=1)
    coefficients, *_ = np.linalg.lstsq(basis, samples, rcond=None)
    residual = float(np.max(np.abs(basis @ coefficients - samples)))
    amplitudes = [float(math.hypot(*coefficients[i : i + 2])) for i in (1, 3)]
    return amplitudes, residual


def sounding_from(samples: np.ndarray) -> int:
    """The first sample of the tone (the fake microphone and the player start with silence)."""
    loud = np.nonzero(np.abs(samples) > 0.05)[0]
    assert loud.size, "no tone at all"
    return int(loud[0])


def gateway(received: list[tuple[float, ovp.AudioFrame]]) -> Any:
    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        async for item in session:
            if not isinstance(item, ovp.AudioFrame):
                continue
            received.append((time.monotonic(), item))
            if len(received) <= ECHOED:
                session.send_audio(item.pcm)
            if len(received) == ECHOED:
                for _ in range(BURST):
                    session.send_audio(bytes(range(256)) * 2 + bytes(128))
                session.send_agent_barge_in(turn_id="turn_1", played_bytes=0, played_ms=0)
                session.send_audio_flush(cause=ovp.FlushCause.BARGE_IN, turn_id="turn_1")
            if len(received) == TOTAL:
                session.end()
                return

    return handler


def quiet(result: dict[str, Any]) -> str | None:
    """Why the run cannot be held to the real-time bounds, or None: while it captured, the page's
    main thread stalled, or went without the audio thread's blocks, by more than ``QUIET_MS``; the
    echo's way (page -> gateway -> page) varied by more than that once the player started; or the
    audio thread skipped render quanta (the recording has a hole)."""
    start, end = result["sends"][0], result["sends"][-1]
    stall = max((s for at, s in result["stalls"] if at < end and at + s > start), default=0.0)
    stall = max(stall, result["input"]["wait"])
    transit = np.array(result["echoes"][:ECHOED]) - np.array(result["sends"][:ECHOED])
    # A frame late before the player started (it waits for the target) only starts it later.
    jitter = float(transit[ovp.PLAYBACK_TARGET_FRAMES :].max() - transit.min())
    contiguous = result["output"]["contiguous"] and result["input"]["contiguous"]
    if stall > QUIET_MS or jitter > QUIET_MS or not contiguous:
        return f"main thread stall {stall:.0f} ms, echo jitter {jitter:.0f} ms, " + (
            "contiguous audio" if contiguous else "render quanta skipped"
        )
    return None


def check_sent(
    result: dict[str, Any], received: list[tuple[float, ovp.AudioFrame]], noise: str | None
) -> None:
    """What the gateway received: every frame 640 bytes, frame_seq without a gap, rtp_timestamp
    320 a frame made (a frame the capture dropped is a jump of its media clock); paced at the
    source; 50 frames a second at the gateway."""
    frames = [frame for _, frame in received]
    assert len(frames) == TOTAL
    assert all(len(frame.pcm) == ovp.PCM_BYTES_PER_FRAME for frame in frames)
    assert [frame.frame_seq for frame in frames] == list(range(TOTAL))
    capture = result["capture"]
    steps = [(b.rtp_timestamp - a.rtp_timestamp) % 2**32 for a, b in itertools.pairwise(frames)]
    assert all(step % ovp.SAMPLES_PER_FRAME == 0 and step > 0 for step in steps), steps
    jumped = sum(step // ovp.SAMPLES_PER_FRAME - 1 for step in steps)
    assert capture["dropped"] == 0 and jumped <= capture["overflowed"], (capture, jumped)
    sends = np.array(result["sends"][:TOTAL])
    # Never a burst; performance.now() is coarsened to 0.1 ms, with jitter.
    assert float(np.diff(sends).min()) >= ovp.CAPTURE_MIN_GAP_MS - COARSE_MS
    # Sends on a 20 ms grid: how far each is behind the earliest-placed one.
    lag = sends - ovp.FRAME_MS * np.arange(sends.size)
    spread = float(lag.max() - lag.min())
    if noise is None:
        assert capture["restarts"] == capture["overflowed"] == 0, capture
        assert spread <= ovp.CAPTURE_RESTART_MS + ovp.FRAME_MS, spread  # never drifts
        arrivals = [at for at, _ in received]
        per_second = (TOTAL - 1) / (arrivals[-1] - arrivals[0])
        assert 48.5 <= per_second <= 51.5, per_second


def samples(recording: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(recording["samples"]), dtype=np.float32)


def check_captured_audio(
    result: dict[str, Any], received: list[tuple[float, ovp.AudioFrame]], rate: int
) -> str | None:
    """The received audio is the tone resampled to 16 kHz: one fit of the tones over the whole
    stream, each sample placed at its frame's rtp_timestamp. Judged when what the capture's
    worklet got was the tone without a break (Chromium's own capture path, which converts the
    fake device's 44.1 kHz to the context's rate, may drop samples when the machine is loaded):
    else the reason it was not."""
    tapped = result["input"]
    if tapped["contiguous"]:
        raw = samples(tapped).astype(np.float64)
        begins = sounding_from(raw) + rate * WARM_UP_MS // 1000
        _, residual = fit(raw[begins:], np.arange(raw.size - begins) / rate)
        if residual > RAW_TOLERANCE:
            return f"the capture's input broke (Chromium's capture path): {residual:.1e}"
    else:
        return "the capture's input skipped render quanta"
    frames = [frame for _, frame in received]
    pcm = np.frombuffer(b"".join(frame.pcm for frame in frames), dtype="<i2") / 32768
    clock = np.concatenate(
        [
            (frame.rtp_timestamp - frames[0].rtp_timestamp) % 2**32
            + np.arange(ovp.SAMPLES_PER_FRAME)
            for frame in frames
        ]
    )
    start = sounding_from(pcm) + ovp.SAMPLE_RATE_HZ * WARM_UP_MS // 1000
    amplitudes, residual = fit(pcm[start:], clock[start:] / ovp.SAMPLE_RATE_HZ)
    assert residual <= CAPTURED_TOLERANCE, residual
    for found, (_, amplitude) in zip(amplitudes, TONES, strict=True):
        assert abs(found - amplitude / 32767) <= 1e-3 * amplitude / 32767, amplitudes
    return None


def check_played(result: dict[str, Any], rate: int, noise: str | None) -> None:
    """The echo plays with no gap once warmed up; after the barge-in, silence."""
    played = result["playback"]
    assert played["lost"] == 0 and played["flushes"] == 2, played
    assert played["flushed"] >= BURST - 1, played
    recorded = samples(result["output"])
    flush_at = result["flushFrame"] - result["output"]["from"]
    after = recorded[flush_at + int(SILENCE_AFTER_FLUSH_S * rate) :]
    assert after.size > rate // 2 and not np.any(after), np.nonzero(after)[0][:5]
    begins = sounding_from(recorded) + rate * WARM_UP_MS // 1000
    ends = flush_at - rate // 50  # the audio clock the page reads may run a quantum or two behind
    assert ends - begins > rate, (begins, ends)  # over a second of echo heard
    if noise is None:
        gaps = ("concealed", "underruns", "late", "overflowed")
        assert [played[name] for name in gaps] == [0, 0, 0, 0], played
        t = np.arange(ends - begins) / rate
        _, residual = fit(recorded[begins:ends].astype(np.float64), t)
        assert residual <= PLAYED_TOLERANCE, residual


@pytest.mark.parametrize("rate", [44100, 48000])
def test_the_fake_microphone_reaches_the_gateway_and_its_echo_plays_until_the_barge_in(
    rate: int, site: Path, tone_file: Path
) -> None:
    received: list[tuple[float, ovp.AudioFrame]] = []
    flags = (
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream",
        f"--use-file-for-fake-audio-capture={tone_file}",
        "--autoplay-policy=no-user-gesture-required",
    )

    async def scenario() -> dict[str, Any]:
        async with serving(gateway(received)) as gate:
            with serve_folder(site) as base:
                async with chromium_page(*flags) as page:
                    query = urllib.parse.urlencode(
                        {"url": gate.url, "session": SESSION, "token": token(), "rate": rate}
                    )
                    await page.goto(f"{base}/audio.html?{query}")
                    await page.wait_for_function("window.result !== undefined", timeout=30_000)
                    answer: dict[str, Any] = await page.evaluate("window.result")
                    assert "error" not in answer, (answer, page.console_lines)
                    errors = [
                        line
                        for line in page.console_lines
                        if line.startswith(("error", "pageerror"))
                    ]
                    assert errors == [], errors
                    return answer

    result = run(scenario(), timeout=60)
    assert result["sampleRate"] == rate and result["end"] == "agent_ended"
    noise = quiet(result)
    check_sent(result, received, noise)
    broken = check_captured_audio(result, received, rate)
    check_played(result, rate, noise)
    for reason in (noise, broken):
        if reason is not None:
            warnings.warn(f"judged less strictly: {reason}", stacklevel=1)
