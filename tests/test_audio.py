"""The audio helpers of both bindings: ``voxwire.audio`` (Python) and ``voxwire/audio`` (npm).

The resampler of each is held to ``scipy.signal.resample_poly`` (the reference: the same filter,
computed by numpy) within float32 rounding, at ten rate pairs, and the two bindings to each other
to the bit, whatever the blocks the input is cut into: this module writes the vectors (input,
scipy's output, the Python binding's output and PCM16 frames) and runs the Node unit tests of
``tests/typescript/audio.test.ts`` against them.
"""

from __future__ import annotations

import json
import math
import struct
from array import array
from pathlib import Path

import numpy as np
import pytest
from scipy.signal import resample_poly

from tests.conftest import ROOT
from tests.node import consumer, node, run
from voxwire.audio import (
    AudioError,
    Framer,
    Rechunker,
    Resampler,
    float_to_pcm16,
    pcm16_to_float,
)
from voxwire.errors import VoxwireError
from voxwire.ovp import PCM_BYTES_PER_FRAME, SAMPLE_RATE_HZ

PAIRS = [
    (44100, 16000),
    (48000, 16000),
    (96000, 16000),
    (32000, 16000),
    (22050, 16000),
    (11025, 16000),
    (8000, 16000),
    (16000, 44100),
    (16000, 48000),
    (16000, 16000),
]
SECONDS = 0.25
BLOCKS = (1, 100, 37, 4096, 3)
"""The Python binding's blocks, cycled (the Node tests cut the input their own ways)."""


def signal(rate: int) -> np.ndarray:
    """A quarter second of a chirp under noise, on PCM16 values (``v / 32768``), as float32."""
    rng = np.random.default_rng(rate)
    t = np.arange(int(rate * SECONDS)) / rate
    chirp = 0.6 * np.sin(2 * np.pi * (100 * t + 0.5 * (rate / 2 - 100) / SECONDS * t * t))
    noisy = chirp + rng.uniform(-0.3, 0.3, t.size)
    return (np.round(noisy * 32767) / 32768).astype(np.float32)


def resample_in_blocks(from_rate: int, to_rate: int, x: np.ndarray) -> array[float]:
    resampler = Resampler(from_rate, to_rate)
    out = array("f")
    values = x.tolist()
    offset = index = 0
    while offset < len(values):
        size = BLOCKS[index % len(BLOCKS)]
        out += resampler.push(values[offset : offset + size])
        offset += size
        index += 1
    return out + resampler.flush()


def rechunk(rate: int, pcm: bytes) -> list[bytes]:
    """Frames of a Rechunker fed odd-sized pieces (a sample split across two pushes)."""
    rechunker = Rechunker(rate)
    frames: list[bytes] = []
    for offset in range(0, len(pcm), 1001):
        frames += rechunker.push(pcm[offset : offset + 1001])
    return frames + rechunker.flush()


@pytest.fixture(scope="module")
def vectors(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("audio-vectors")
    listing = []
    for from_rate, to_rate in PAIRS:
        name = f"{from_rate}-{to_rate}"
        x = signal(from_rate)
        g = math.gcd(from_rate, to_rate)
        reference = resample_poly(x.astype(np.float64), to_rate // g, from_rate // g)
        x.tofile(folder / f"{name}.in.f32")
        np.asarray(reference, dtype=np.float64).tofile(folder / f"{name}.scipy.f64")
        (folder / f"{name}.py.f32").write_bytes(resample_in_blocks(from_rate, to_rate, x).tobytes())
        frames = None
        if to_rate == SAMPLE_RATE_HZ:
            frames = f"{name}.frames"
            pcm = float_to_pcm16(x.tolist())
            (folder / frames).write_bytes(b"".join(rechunk(from_rate, pcm)))
        listing.append(
            {
                "from": from_rate,
                "to": to_rate,
                "input": f"{name}.in.f32",
                "scipy": f"{name}.scipy.f64",
                "python": f"{name}.py.f32",
                "frames": frames,
            }
        )
    (folder / "vectors.json").write_text(json.dumps(listing))
    return folder


@pytest.mark.parametrize(("from_rate", "to_rate"), PAIRS)
def test_the_python_resampler_is_scipys_resample_poly_within_float32_rounding(
    from_rate: int, to_rate: int, vectors: Path
) -> None:
    name = f"{from_rate}-{to_rate}"
    ours = np.fromfile(vectors / f"{name}.py.f32", dtype=np.float32)
    reference = np.fromfile(vectors / f"{name}.scipy.f64", dtype=np.float64)
    assert ours.size == reference.size == math.ceil(len(signal(from_rate)) * to_rate / from_rate)
    worst = float(np.max(np.abs(ours - reference)))
    assert worst <= 2**-23, worst  # half a float32 step below 2: the rounding to float32
    if from_rate != to_rate:
        assert worst > 0  # the comparison compares
    whole = Resampler(from_rate, to_rate)
    at_once = whole.push(signal(from_rate).tolist()) + whole.flush()
    assert at_once.tobytes() == ours.tobytes(), "the same to the bit whatever the blocks"


def test_the_node_tests_hold_the_typescript_resampler_to_scipy_and_to_python(
    vectors: Path,
) -> None:
    project = consumer()
    out = project.compile(ROOT / "tests" / "typescript" / "audio.test.ts")
    done = run(
        ["env", f"VOXWIRE_AUDIO_VECTORS={vectors}", node(), "--test", str(out / "audio.test.js")],
        project.root,
        timeout=120,
    )
    assert "# fail 0" in done.stdout, done.stdout
    tests = int(done.stdout.split("# tests ")[1].split()[0])
    assert tests >= 3 * len(PAIRS), done.stdout


def test_a_stream_of_n_samples_gives_ceil_n_up_over_down_and_then_starts_again() -> None:
    resampler = Resampler(44100, 16000)
    assert (resampler.up, resampler.down, resampler.lookahead) == (160, 441, 28)
    for n in (1, 440, 441, 442, 10_000):
        count = len(resampler.push([0.25] * n)) + len(resampler.flush())
        assert count == math.ceil(n * 160 / 441), n
    assert len(resampler.flush()) == 0
    same = Resampler(16000, 16000)
    assert same.push([0.5, -0.25]).tolist() == [0.5, -0.25] and len(same.flush()) == 0


@pytest.mark.parametrize(
    ("rates", "argument"),
    [((0, 16000), "from_rate"), ((44100.0, 16000), "from_rate"), ((16000, -8000), "to_rate")],
)
def test_a_rate_that_is_no_positive_integer_is_refused_naming_the_argument(
    rates: tuple[int, int], argument: str
) -> None:
    with pytest.raises(AudioError, match=f"^{argument} must be a positive integer") as caught:
        Resampler(*rates)
    assert isinstance(caught.value, VoxwireError) and isinstance(caught.value, ValueError)
    with pytest.raises(AudioError, match=r"^from_rate"):
        Rechunker(True)


def test_pcm16_rounds_half_to_even_clips_and_comes_back_exactly() -> None:
    cases = {
        0.5 / 32768: 0,
        1.5 / 32768: 2,
        2.5 / 32768: 2,
        -1.5 / 32768: -2,
        -2.5 / 32768: -2,
        1.0: 32767,
        32766.5 / 32768: 32766,
        -1.0: -32768,
        -3.0: -32768,
        math.nan: 0,
    }
    for x, v in cases.items():
        assert float_to_pcm16([x]) == struct.pack("<h", v), x
    every = struct.pack("<65536h", *range(-32768, 32768))
    floats = pcm16_to_float(every)
    assert floats[0] == -1.0 and floats[-1] == 32767 / 32768
    assert float_to_pcm16(floats) == every
    with pytest.raises(AudioError, match="3 bytes"):
        pcm16_to_float(b"\0\0\0")


def test_the_framer_cuts_frames_across_pushes_and_pads_the_last() -> None:
    framer = Framer()
    data = bytes(range(256)) * 6  # 1536 bytes
    frames = framer.push(data[:639]) + framer.push(data[639:641]) + framer.push(data[641:])
    assert [len(f) for f in frames] == [PCM_BYTES_PER_FRAME] * 2
    assert b"".join(frames) == data[:1280] and framer.pending == 256
    assert framer.flush() == data[1280:] + bytes(384)
    assert framer.flush() is None
    with pytest.raises(AudioError, match="frame_bytes"):
        Framer(0)


def test_the_rechunker_makes_16_khz_frames_of_any_rate_and_any_pieces() -> None:
    tone = [0.5 * math.sin(2 * math.pi * 1000 * i / 8000) for i in range(8000)]
    pcm = float_to_pcm16(tone)
    frames = rechunk(8000, pcm)
    assert all(len(f) == PCM_BYTES_PER_FRAME for f in frames)
    assert len(frames) == 50  # one second at 16 kHz: 16000 samples, 50 frames
    samples = np.frombuffer(b"".join(frames), dtype="<i2") / 32768
    t = np.arange(samples.size) / SAMPLE_RATE_HZ
    steady = slice(200, -200)  # the stream's edges meet the zeros before and after it
    expected = 0.5 * np.sin(2 * np.pi * 1000 * t)
    assert float(np.max(np.abs(samples[steady] - expected[steady]))) < 1e-3
    assert rechunk(8000, pcm[:1]) == []  # an odd byte alone waits for its pair
