"""Audio at other rates than OVP's: an exact resampler, PCM16 conversion and a frame re-chunker.

OVP carries 16 kHz mono PCM16LE in 640-byte frames. A client holding audio at another rate
(8 kHz telephony, 24 kHz TTS, 44.1 or 48 kHz files) turns it into frames with a
:class:`Rechunker`; the pieces it is made of are public too:

```python
from voxwire.audio import Rechunker

rechunker = Rechunker(44100)                       # PCM16LE at 44.1 kHz in
for frame in rechunker.push(pcm_44k):              # 640-byte frames at 16 kHz out
    client.send_audio(frame)
for frame in rechunker.flush():                    # the tail, the last frame padded with silence
    client.send_audio(frame)
```

:class:`Resampler` is the npm package's (``voxwire/audio``): the filter of
``scipy.signal.resample_poly`` (a Kaiser-windowed sinc, beta 5, ``10 * max(up, down)`` taps each
side of the centre), built here with the same operations as there (its own sine, not the
platform's) and summed the same way, left to right in double precision, then rounded to float32.
So it is deterministic to the bit, whatever the blocks the input is cut into, and both bindings
give the same float32 samples and the same PCM16 (``tests/test_audio.py`` holds them to it).
Pure Python, no dependency: about 0.13 s of one core for a second of 44.1 kHz audio.
"""

from __future__ import annotations

import functools
import math
import operator
import sys
from array import array
from collections.abc import Iterable
from functools import reduce

from voxwire.errors import VoxwireError
from voxwire.ovp import PCM_BYTES_PER_FRAME, SAMPLE_RATE_HZ

__all__ = [
    "AudioError",
    "Framer",
    "Rechunker",
    "Resampler",
    "float_to_pcm16",
    "pcm16_to_float",
]

_KAISER_BETA = 5.0
_HALF_TAPS_PER_RATE = 10
"""Taps on each side of the centre, per unit of ``max(up, down)`` (scipy's ``10 * max_rate``)."""
_SERIES_TERMS = 13
"""Terms of the series of sine and cosine on [0, pi/4]: far below a double's precision."""
_SCALE = 32768.0
_BIG_ENDIAN = sys.byteorder == "big"


class AudioError(VoxwireError, ValueError):
    """A rate, a block of PCM or a frame size that cannot be used, named with the argument."""


def _check_rate(argument: str, rate: int) -> int:
    if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
        raise AudioError(
            f"{argument} must be a positive integer number of samples per second, not {rate!r}"
        )
    return rate


def _sin_series(x: float) -> float:
    x2 = x * x
    term = total = x
    for k in range(1, _SERIES_TERMS + 1):
        term = (-term * x2) / (2 * k * (2 * k + 1))
        total += term
    return total


def _cos_series(x: float) -> float:
    x2 = x * x
    term = total = 1.0
    for k in range(1, _SERIES_TERMS + 1):
        term = (-term * x2) / ((2 * k - 1) * (2 * k))
        total += term
    return total


def _sin_pi_ratio(j: int, m: int) -> float:
    """sin(pi * j / m), reduced exactly in integers to [0, pi/4] (the TypeScript twin's steps)."""
    r = j % (2 * m)
    sign = 1.0
    if r >= m:
        r -= m
        sign = -1.0
    if 2 * r > m:
        r = m - r
    if 4 * r > m:
        return sign * _cos_series(math.pi * ((m - 2 * r) / (2 * m)))
    return sign * _sin_series(math.pi * (r / m))


def _bessel_i0(x: float) -> float:
    y = (x / 2) * (x / 2)
    term = total = 1.0
    k = 1
    while term > total * 1e-17:
        term = (term * y) / (k * k)
        total += term
        k += 1
    return total


@functools.cache
def _phases(up: int, down: int) -> tuple[tuple[float, ...], ...]:
    """The taps of each phase ``r`` (``0 <= r < up``), the oldest input sample's first."""
    rate = max(up, down)
    half = _HALF_TAPS_PER_RATE * rate
    norm = _bessel_i0(_KAISER_BETA)
    taps: list[float] = []
    total = 0.0
    for n in range(2 * half + 1):
        j = n - half
        sinc = 1.0 if j == 0 else _sin_pi_ratio(j, rate) / (math.pi * (j / rate))
        r = j / half
        window = _bessel_i0(_KAISER_BETA * math.sqrt(1 - r * r)) / norm
        tap = (sinc * window) / rate
        taps.append(tap)
        total += tap
    taps = [(tap / total) * up for tap in taps]
    return tuple(tuple(reversed(taps[r::up])) for r in range(up))


class Resampler:
    """Converts a stream of float samples from ``from_rate`` to ``to_rate``, block by block.

    ``push`` returns every output sample the input so far determines, ``flush`` the rest (as if
    zeros followed) and starts a new stream. Output sample ``n`` is centred on input time
    ``n * down / up`` (no delay: :attr:`lookahead` input samples are held back), and a stream of
    ``N`` samples gives ``ceil(N * up / down)``, as ``scipy.signal.resample_poly`` does for the
    whole signal at once. Samples are floats, full scale 1.0; the output is float32
    (``array('f')``).

    Raises :class:`AudioError` for a rate that is no positive integer.
    """

    def __init__(self, from_rate: int, to_rate: int) -> None:
        self.from_rate = _check_rate("from_rate", from_rate)
        self.to_rate = _check_rate("to_rate", to_rate)
        divisor = math.gcd(from_rate, to_rate)
        self.up = to_rate // divisor
        self.down = from_rate // divisor
        self._identity = self.up == self.down == 1
        self._phases = () if self._identity else _phases(self.up, self.down)
        self._half = _HALF_TAPS_PER_RATE * max(self.up, self.down)
        self._history: list[float] = []
        self._base = 0
        self._received = 0
        self._made = 0

    def __repr__(self) -> str:
        return f"Resampler({self.from_rate}, {self.to_rate})"

    @property
    def lookahead(self) -> int:
        """Input samples held back: what the converter must see ahead of an output it makes."""
        return 0 if self._identity else -(-self._half // self.up)

    def push(self, samples: Iterable[float]) -> array[float]:
        """Take ``samples``; return every output sample they complete (possibly none)."""
        if self._identity:
            return array("f", samples)
        block = [float(x) for x in samples]
        self._history.extend(block)
        self._received += len(block)
        ready = (self._received * self.up - self._half - 1) // self.down + 1
        return self._produce(max(ready, self._made))

    def flush(self) -> array[float]:
        """The outputs still due, as if zeros followed the input; then a new stream begins."""
        if self._identity:
            return array("f")
        out = self._produce(-(-self._received * self.up // self.down))
        self.reset()
        return out

    def reset(self) -> None:
        """Forget the stream (what is held is dropped): the next sample begins a new one."""
        self._history = []
        self._base = self._received = self._made = 0

    def _produce(self, until: int) -> array[float]:
        up, down, half, phases = self.up, self.down, self._half, self._phases
        history, base, last = self._history, self._base, self._received - 1
        add, mul = operator.add, operator.mul
        out: list[float] = []
        for n in range(self._made, until):
            centre = n * down + half
            r = centre % up
            hi = centre // up
            phase = phases[r]
            lo = hi - len(phase) + 1
            start, stop = max(lo, 0), min(hi, last)
            if start > stop:
                out.append(0.0)
                continue
            taps = phase[start - lo : stop - lo + 1]
            window = history[start - base : stop - base + 1]
            out.append(reduce(add, map(mul, taps, window), 0.0))  # 0 + p0 + p1...: as in TS
        self._made = until
        centre = until * down + half
        r = centre % up
        lo = centre // up - len(phases[r]) + 1
        keep = max(0, min(lo, self._received) - base)
        if keep:
            del history[:keep]
            self._base += keep
        return array("f", out)


def float_to_pcm16(samples: Iterable[float]) -> bytes:
    """Float samples to PCM16LE: ``x * 32768`` rounded to the nearest integer (ties to even) and
    clipped to -32768..32767 (1.0 is 32767); NaN is 0. The npm package's ``floatToPcm16`` twin."""
    values = array("h")
    for x in samples:
        if x != x:
            values.append(0)
            continue
        v = x * _SCALE
        values.append(-32768 if v <= -32768 else 32767 if v >= 32767 else round(v))
    if _BIG_ENDIAN:
        values.byteswap()
    return values.tobytes()


def pcm16_to_float(pcm: bytes | bytearray | memoryview) -> array[float]:
    """PCM16LE to float samples, ``v / 32768`` exactly. Raises :class:`AudioError` for an odd
    number of bytes."""
    view = memoryview(pcm).cast("B")
    if len(view) % 2:
        raise AudioError(f"PCM16 holds 2 bytes a sample: {len(view)} bytes is not whole samples")
    values = array("h", view.tobytes())
    if _BIG_ENDIAN:
        values.byteswap()
    return array("f", [v / _SCALE for v in values])


class Framer:
    """Cuts a stream of bytes into frames of ``frame_bytes`` (640: 20 ms of OVP audio)."""

    def __init__(self, frame_bytes: int = PCM_BYTES_PER_FRAME) -> None:
        if isinstance(frame_bytes, bool) or not isinstance(frame_bytes, int) or frame_bytes <= 0:
            raise AudioError(f"frame_bytes must be a positive integer, not {frame_bytes!r}")
        self.frame_bytes = frame_bytes
        self._held = bytearray()

    @property
    def pending(self) -> int:
        """Bytes held for the next frame (fewer than ``frame_bytes``)."""
        return len(self._held)

    def push(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Take ``data``; return the frames it completes, in order."""
        self._held += data
        size = self.frame_bytes
        whole = len(self._held) - len(self._held) % size
        frames = [bytes(self._held[i : i + size]) for i in range(0, whole, size)]
        del self._held[:whole]
        return frames

    def flush(self) -> bytes | None:
        """What is held as one last frame padded with zeros (silence), or ``None``."""
        if not self._held:
            return None
        frame = bytes(self._held.ljust(self.frame_bytes, b"\0"))
        self._held.clear()
        return frame


class Rechunker:
    """PCM16LE at ``rate`` in, 640-byte frames of 16 kHz PCM16LE out (see the module example).

    Any number of bytes may be pushed (an odd byte waits for its pair). Raises
    :class:`AudioError` for a rate that is no positive integer.
    """

    def __init__(self, rate: int) -> None:
        self.resampler = Resampler(rate, SAMPLE_RATE_HZ)
        self._framer = Framer()
        self._odd = b""

    def __repr__(self) -> str:
        return f"Rechunker({self.resampler.from_rate})"

    def push(self, pcm: bytes | bytearray | memoryview) -> list[bytes]:
        """Take PCM16LE at the rechunker's rate; return the 16 kHz frames it completes."""
        data = self._odd + bytes(pcm)
        cut = len(data) - len(data) % 2
        self._odd = data[cut:]
        samples = self.resampler.push(pcm16_to_float(data[:cut]))
        return self._framer.push(float_to_pcm16(samples))

    def flush(self) -> list[bytes]:
        """The frames still due, the last one padded with silence; then a new stream begins."""
        self._odd = b""
        frames = self._framer.push(float_to_pcm16(self.resampler.flush()))
        last = self._framer.flush()
        return frames if last is None else [*frames, last]
