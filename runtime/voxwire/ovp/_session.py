"""What the two OVP cores share: the envelope stamper, the frame counters, the shared events.

Not public and holding neither role: :mod:`voxwire.ovp.client_core` and
:mod:`voxwire.ovp.gateway_core` are the cores.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import msgspec

from voxwire.errors import SessionStateError
from voxwire.ovp import (
    CHANNELS,
    FRAME_MS,
    FRAME_SEQ_MODULUS,
    MAX_SEQ,
    RESUME_WINDOW_MS,
    RTP_TIMESTAMP_MODULUS,
    SAMPLE_RATE_HZ,
    SAMPLE_WIDTH_BITS,
    SAMPLES_PER_FRAME,
    SESSION_ID_PATH_PATTERN,
    AudioFormat,
    AudioFrame,
    FrameDirection,
    Message,
    ProtocolError,
    SessionEnd,
    encode,
    encode_frame,
)

__all__ = [
    "AUDIO_FORMAT",
    "RESUME_WINDOW",
    "AudioIn",
    "FrameOrder",
    "FrameWriter",
    "Sent",
    "SessionOver",
    "SessionStateError",
    "Stamper",
    "check_session_id",
    "describe",
    "timestamp",
]

M = TypeVar("M", bound=Message)

AUDIO_FORMAT: Final = AudioFormat(
    sample_rate_hz=SAMPLE_RATE_HZ,
    sample_width_bits=SAMPLE_WIDTH_BITS,
    channels=CHANNELS,
    frame_ms=FRAME_MS,
)
"""The audio invariants every session.start carries (and a client requires)."""

RESUME_WINDOW: Final = RESUME_WINDOW_MS / 1000
"""The resume window in seconds."""

_SESSION_ID: Final = re.compile(SESSION_ID_PATH_PATTERN)
_HALF_FRAME_SEQ: Final = FRAME_SEQ_MODULUS // 2


class Sent(msgspec.Struct, frozen=True):
    """An event this side stamped and wrote (the stamped message, as the peer receives it, and
    its size in bytes as written)."""

    message: Message
    size: int = 0


class AudioIn(msgspec.Struct, frozen=True):
    """An audio frame from the peer that passed the header and frame_seq checks."""

    frame: AudioFrame


@dataclass(frozen=True, slots=True)
class SessionOver:
    """The session is over: ended by ``session.end`` (``end``), or failed (``code``, ``detail``)."""

    end: SessionEnd | None
    code: str | None
    detail: str


def timestamp(seconds: float) -> datetime:
    """``seconds`` since the Unix epoch as an aware UTC datetime (the envelope's ``ts``)."""
    return datetime.fromtimestamp(seconds, UTC)


def describe(error: ProtocolError) -> str:
    """The error's text without its code (the event carries the code beside it)."""
    return str(error).removeprefix(f"{error.code}: ")


def check_session_id(session_id: str) -> str:
    """Return ``session_id`` if the endpoint path can carry it, else raise ``ValueError``."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise ValueError(
            f"not an OVP session id (1 to 128 of A-Z a-z 0-9 . _ ~ -): {session_id!r:.140}"
        )
    return session_id


class Stamper:
    """Stamps and encodes one side's events: seq +1 from 0, ts, session_id."""

    def __init__(self, session_id: str, epoch: float, allowed: frozenset[str]) -> None:
        self.session_id = session_id
        self.epoch = epoch
        self.next_seq = 0
        self._allowed = allowed

    def build(self, kind: type[M], fields: Mapping[str, Any], now: float) -> tuple[M, bytes]:
        if kind.type not in self._allowed:
            raise TypeError(f"{kind.__name__} is not an event this side sends")
        if self.next_seq > MAX_SEQ:
            raise SessionStateError(f"seq would pass {MAX_SEQ}: the session cannot send more")
        message = kind(seq=self.next_seq, ts=self.ts(now), session_id=self.session_id, **fields)
        data = encode(message)  # type: ignore[arg-type]  # kind is checked against the union
        self.next_seq += 1
        return message, data

    def ts(self, now: float) -> datetime:
        return timestamp(self.epoch + now)


class FrameWriter:
    """Builds one direction's frames: frame_seq +1 from 0, rtp_timestamp +320 (mod 2^32)."""

    def __init__(self, direction: FrameDirection) -> None:
        # A plain int: encode_frame writes a header of plain ints in one call (an IntEnum
        # member takes its checked path, ~3x the cost).
        self.direction = int(direction)
        self.frame_seq = 0
        self.rtp_timestamp = 0
        self.last: AudioFrame | None = None
        """The last frame built (what the session's statistics count as sent)."""

    def build(
        self, pcm: bytes | bytearray | memoryview, flags: int, rtp_timestamp: int | None
    ) -> bytes:
        rtp = self.rtp_timestamp if rtp_timestamp is None else rtp_timestamp
        frame = self.last = AudioFrame(
            direction=self.direction,
            flags=flags,
            frame_seq=self.frame_seq,
            rtp_timestamp=rtp,
            pcm=pcm,
        )
        data = encode_frame(frame)
        self.frame_seq = (self.frame_seq + 1) % FRAME_SEQ_MODULUS
        self.rtp_timestamp = (rtp + SAMPLES_PER_FRAME) % RTP_TIMESTAMP_MODULUS
        return data


class FrameOrder:
    """Accepts frame_seq values that advance in serial-number arithmetic (RFC 1982)."""

    def __init__(self) -> None:
        self.last: int | None = None

    def accept(self, frame_seq: int) -> str | None:
        """``None`` when ``frame_seq`` advances (and is taken), else why not."""
        if self.last is not None:
            ahead = (frame_seq - self.last) % FRAME_SEQ_MODULUS
            if not 0 < ahead < _HALF_FRAME_SEQ:
                return f"frame_seq {frame_seq} does not advance past {self.last}"
        self.last = frame_seq
        return None
