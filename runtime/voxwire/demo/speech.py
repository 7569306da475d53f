"""The demo agent's ear: where the caller's speech starts and ends, judged by energy alone.

:class:`SpeechDetector` is sans-I/O: it is fed the caller's 20 ms frames with the time each
arrived and says when speech started and when an utterance ended. The rule, deliberately simple:

- a frame is **voiced** when its RMS level is at least :data:`SPEECH_DBFS` (−45 dBFS: a voice
  at a normal distance from a laptop's microphone is −35 to −15 dBFS, a quiet room after the
  browser's noise suppression below −60);
- speech **starts** once :data:`MIN_SPEECH_FRAMES` frames of one utterance were voiced (200 ms:
  a click or a cough is no speech, and is no barge-in either);
- an utterance **ends** after :data:`END_SILENCE_FRAMES` unvoiced frames in a row (500 ms, the
  "hangover": shorter pauses are pauses between words), or at once on a frame the client marked
  ``last_of_utterance`` (the protocol's own end-of-speech flag). An utterance with fewer than
  :data:`MIN_SPEECH_FRAMES` voiced frames is forgotten.

The hangover is the detector's price: the end of speech is known 500 ms after it happened, and
the demo agent's ``agent.latency.breakdown`` shows it (``stt_final_ms``).
"""

from __future__ import annotations

import math
import sys
from array import array
from dataclasses import dataclass
from typing import Final

from voxwire import ovp

__all__ = [
    "END_SILENCE_FRAMES",
    "MIN_SPEECH_FRAMES",
    "SPEECH_DBFS",
    "SpeechDetector",
    "SpeechStarted",
    "Utterance",
    "level_dbfs",
]

SPEECH_DBFS: Final = -45.0
"""A frame whose RMS level is at least this (dB relative to full scale) is voiced."""
MIN_SPEECH_FRAMES: Final = 10
"""Voiced frames (200 ms) before an utterance counts as speech."""
END_SILENCE_FRAMES: Final = 25
"""Unvoiced frames in a row (500 ms) that end an utterance."""

_FULL_SCALE: Final = 32768.0
_THRESHOLD: Final = (_FULL_SCALE * 10 ** (SPEECH_DBFS / 20)) ** 2
"""The mean square of a frame at exactly :data:`SPEECH_DBFS`."""


def _mean_square(pcm: bytes | bytearray | memoryview) -> float:
    samples = array("h")
    samples.frombytes(pcm)
    if sys.byteorder == "big":
        samples.byteswap()  # PCM16LE on the wire
    return sum(s * s for s in samples) / len(samples) if samples else 0.0


def level_dbfs(pcm: bytes | bytearray | memoryview) -> float:
    """The RMS level of PCM16LE samples in dBFS: 0 for a full-scale square wave, ``-inf`` for
    digital silence."""
    mean_square = _mean_square(pcm)
    return 10 * math.log10(mean_square / _FULL_SCALE**2) if mean_square > 0 else -math.inf


@dataclass(frozen=True)
class SpeechStarted:
    """The caller has been speaking for :data:`MIN_SPEECH_FRAMES` voiced frames."""

    started_at: float
    """When the utterance's first voiced frame arrived (the detector's clock, seconds)."""


@dataclass(frozen=True)
class Utterance:
    """One utterance of the caller, over."""

    started_at: float
    """When its first voiced frame arrived."""
    ended_at: float
    """When its last voiced frame arrived: the end of the speech, not of its detection."""
    voiced_frames: int
    """Its voiced frames (unvoiced ones between words not counted)."""
    first_frame_seq: int
    last_frame_seq: int
    """The frame_seq of its first and last voiced frames."""
    peak_dbfs: float
    """The level of its loudest frame."""

    @property
    def speech_ms(self) -> int:
        """The voiced audio it held, in milliseconds."""
        return self.voiced_frames * ovp.FRAME_MS


class SpeechDetector:
    """Feed it every caller frame in order (:meth:`feed`); see the module for the rule."""

    def __init__(self) -> None:
        self._voiced = 0
        self._silent = 0
        self._started_at = 0.0
        self._ended_at = 0.0
        self._first_seq = 0
        self._last_seq = 0
        self._peak = 0.0
        self.voiced = False
        """Whether the last frame fed was voiced."""

    @property
    def speaking(self) -> bool:
        """Whether speech has started and its utterance has not ended yet."""
        return self._voiced >= MIN_SPEECH_FRAMES

    @property
    def voiced_frames(self) -> int:
        """Voiced frames of the utterance under way (0 between utterances)."""
        return self._voiced

    def feed(self, frame: ovp.AudioFrame, now: float) -> SpeechStarted | Utterance | None:
        """One frame of the caller, arrived at ``now``: what it changed, if anything."""
        mean_square = _mean_square(frame.pcm)
        voiced = self.voiced = mean_square >= _THRESHOLD
        if voiced:
            if self._voiced == 0:
                self._started_at, self._first_seq, self._peak = now, frame.frame_seq, 0.0
            self._voiced += 1
            self._silent = 0
            self._ended_at, self._last_seq = now, frame.frame_seq
            self._peak = max(self._peak, mean_square)
        elif self._voiced:
            self._silent += 1
        if not self._voiced:
            return None
        if self._silent >= END_SILENCE_FRAMES or frame.last_of_utterance:
            return self._end()
        if voiced and self._voiced == MIN_SPEECH_FRAMES:
            return SpeechStarted(self._started_at)
        return None

    def _end(self) -> Utterance | None:
        utterance = None
        if self._voiced >= MIN_SPEECH_FRAMES:
            utterance = Utterance(
                started_at=self._started_at,
                ended_at=self._ended_at,
                voiced_frames=self._voiced,
                first_frame_seq=self._first_seq,
                last_frame_seq=self._last_seq,
                peak_dbfs=10 * math.log10(self._peak / _FULL_SCALE**2),
            )
        self._voiced = self._silent = 0
        return utterance
