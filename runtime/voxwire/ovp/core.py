"""Sans-I/O state machines of OVP: :class:`ClientCore` and :class:`GatewayCore`.

A core owns the protocol's rules and nothing else: no socket, task, clock or logging. Every input
is a method call that carries ``now`` (seconds on the adapter's clock) and returns what happened,
in order: actions for the adapter (:class:`~voxwire.sansio.SendText`,
:class:`~voxwire.sansio.SendBinary`, :class:`~voxwire.sansio.Close`) and events (the dataclasses
below). The gateway's core serves one session across its connections, so its actions name the
link they go to (:class:`ToLink`); ``tick(now)`` fires its deadlines and ``next_deadline()`` says
when to call it next.

```text
client = ClientCore("ovps_1", epoch=time.time() - clock.now())
client.connected(now)                      # [] (a resumed link: [SendText(session.resume)])
client.receive_text(data, now)             # [ServerEvent(SessionStart(...))]
client.send(ovp.AgentInput, {...}, now)    # [Sent(AgentInput(seq=0, ...)), SendText(...)]

gateway = GatewayCore("ovps_1", epoch=...)
link, out = gateway.open_link(now)          # an authenticated connection
gateway.start(call, agent, now)             # [Sent(SessionStart(...)), ToLink(link, SendText(...))]
gateway.receive_text(link, data, now)       # [ClientEvent(...)] or [Sent(Error(...)), ToLink(...)]
```

Every event a core writes is stamped here: ``seq`` strictly +1 per direction for the whole
session (also across a resume), ``ts`` from ``epoch + now``, and the session's id.
"""

from __future__ import annotations

import re
import typing
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Final, TypeAlias, TypeVar

import msgspec
from msgspec import UNSET

from voxwire.ovp import (
    CHANNELS,
    FRAME_ERROR_REPORT_INTERVAL_MS,
    FRAME_MS,
    FRAME_SEQ_MODULUS,
    MAX_ELAPSED_MS,
    MAX_SEQ,
    PROTOCOL_VERSION,
    QUALITY_UPDATE_INTERVAL_MS,
    RECOVERABLE,
    REPLAY_BUFFER_MAX_AGE_MS,
    REPLAY_BUFFER_MAX_BYTES,
    REPLAY_BUFFER_MAX_EVENTS,
    RESUME_WINDOW_MS,
    RTP_TIMESTAMP_MODULUS,
    SAMPLE_RATE_HZ,
    SAMPLE_WIDTH_BITS,
    SAMPLES_PER_FRAME,
    SESSION_ID_PATH_PATTERN,
    AgentBargeIn,
    AgentConfig,
    AgentCostTick,
    AgentHandoffAccepted,
    AgentHandoffCompleted,
    AgentHandoffFailed,
    AgentHandoffRequested,
    AgentOutput,
    AgentToolInvoke,
    AudioFormat,
    AudioFrame,
    CallInfo,
    CallQualityUpdate,
    ClientMessage,
    CloseCode,
    CostBreakdown,
    Error,
    ErrorCode,
    FinalStats,
    FrameDirection,
    Message,
    ProtocolError,
    ServerMessage,
    SessionEnd,
    SessionEndReason,
    SessionPatch,
    SessionResume,
    SessionStart,
    SessionUpdate,
    SupervisorRelease,
    SupervisorTakeover,
    UnknownMessage,
    decode,
    decode_frame,
    encode,
    encode_frame,
)
from voxwire.sansio import Action, Close, SendBinary, SendText

__all__ = [
    "AUDIO_FORMAT",
    "AudioIn",
    "ClientCore",
    "ClientEvent",
    "ClientOutput",
    "Dropped",
    "GatewayCore",
    "GatewayOutput",
    "Ignored",
    "LinkDropped",
    "Rejected",
    "Resumed",
    "Sent",
    "ServerEvent",
    "SessionOver",
    "SessionStateError",
    "ToLink",
    "check_session_id",
    "refuse_token",
]

M = TypeVar("M", bound=Message)

AUDIO_FORMAT: Final = AudioFormat(
    sample_rate_hz=SAMPLE_RATE_HZ,
    sample_width_bits=SAMPLE_WIDTH_BITS,
    channels=CHANNELS,
    frame_ms=FRAME_MS,
)
"""The audio invariants every session.start carries (and a client requires)."""

_SESSION_ID: Final = re.compile(SESSION_ID_PATH_PATTERN)
_WINDOW: Final = RESUME_WINDOW_MS / 1000
# The window is closed (exactly 30 s is inside), so its deadline fires just after it.
_WINDOW_EPSILON: Final = 0.001
_FRAME_REPORT_INTERVAL: Final = FRAME_ERROR_REPORT_INTERVAL_MS / 1000
_CADENCE: Final = QUALITY_UPDATE_INTERVAL_MS / 1000
_HALF_FRAME_SEQ: Final = FRAME_SEQ_MODULUS // 2
_CLIENT_TYPES: Final = frozenset(typing.get_args(ClientMessage))
_SERVER_TYPES: Final = frozenset(typing.get_args(ServerMessage))
_END_REASONS: Final[Mapping[str, SessionEndReason]] = {
    ErrorCode.OVP_CALLER_HANGUP: SessionEndReason.CALLER_HANGUP,
    ErrorCode.OVP_MAX_DURATION_EXCEEDED: SessionEndReason.MAX_DURATION,
    ErrorCode.OVP_SPEND_CAP_EXCEEDED: SessionEndReason.SPEND_CAP,
}
# Codes the gateway core sends on its own; an application never does.
_OWN_CODES: Final = frozenset(
    {ErrorCode.OVP_AUTH_FAILED, ErrorCode.OVP_SUBPROTOCOL_MISMATCH, ErrorCode.OVP_RESUME_EXPIRED}
)
_TOOL_CODES: Final = frozenset({ErrorCode.OVP_TOOL_UNKNOWN, ErrorCode.OVP_TOOL_ARGS_INVALID})
_PROTOCOL_ERROR_CLOSE_CODE: Final = 1002  # RFC 6455 §7.4.1: the peer broke the protocol
_INTERNAL_ERROR_CLOSE_CODE: Final = 1011  # RFC 6455 §7.4.1: the server cannot go on


class SessionStateError(RuntimeError):
    """A call the session's state does not allow (sending before the start or after the end)."""


# ----------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Sent:
    """An event this side stamped and wrote (the stamped message, as the peer receives it)."""

    message: Message


@dataclass(frozen=True, slots=True)
class ServerEvent:
    """A server event for the client's application, each exactly once and in seq order."""

    message: ServerMessage


@dataclass(frozen=True, slots=True)
class ClientEvent:
    """A client event the gateway accepted, for the gateway's application."""

    message: ClientMessage


@dataclass(frozen=True, slots=True)
class AudioIn:
    """An audio frame from the peer that passed the header and frame_seq checks."""

    frame: AudioFrame


@dataclass(frozen=True, slots=True)
class Rejected:
    """A bad server event or frame the client dropped (the client never sends ``error``)."""

    error: ProtocolError


@dataclass(frozen=True, slots=True)
class Ignored:
    """Input the protocol says to drop without an answer (logged at DEBUG and counted)."""

    what: str


@dataclass(frozen=True, slots=True)
class Dropped:
    """The client's link dropped; a reconnect may resume the session until ``resume_by``."""

    resume_by: float


@dataclass(frozen=True, slots=True)
class SessionOver:
    """The session is over: ended by ``session.end`` (``end``), or failed (``code``, ``detail``)."""

    end: SessionEnd | None
    code: str | None
    detail: str


@dataclass(frozen=True, slots=True)
class ToLink:
    """Perform ``action`` on the gateway's connection ``link``."""

    link: int
    action: Action


@dataclass(frozen=True, slots=True)
class LinkDropped:
    """The session's current connection is gone; the resume window runs from ``at``."""

    link: int
    at: float


@dataclass(frozen=True, slots=True)
class Resumed:
    """``link`` resumed the session; ``replayed`` events were sent again before live ones."""

    link: int
    replayed: int


ClientOutput: TypeAlias = (
    SendText
    | SendBinary
    | Close
    | Sent
    | ServerEvent
    | AudioIn
    | Rejected
    | Ignored
    | Dropped
    | SessionOver
)
"""What :class:`ClientCore` returns: actions on its one link, and events."""

GatewayOutput: TypeAlias = (
    ToLink | Sent | ClientEvent | AudioIn | Ignored | LinkDropped | Resumed | SessionOver
)
"""What :class:`GatewayCore` returns: actions addressed to a link, and events."""


# ----------------------------------------------------------------------------- shared parts


def _timestamp(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _describe(error: ProtocolError) -> str:
    """The error's text without its code (the event carries the code beside it)."""
    return str(error).removeprefix(f"{error.code}: ")


class _Stamper:
    """Stamps and encodes one side's events: seq +1 from 0, ts, session_id."""

    def __init__(self, session_id: str, epoch: float, allowed: frozenset[type]) -> None:
        self.session_id = session_id
        self.epoch = epoch
        self.next_seq = 0
        self._allowed = allowed

    def build(self, kind: type[M], fields: Mapping[str, Any], now: float) -> tuple[M, bytes]:
        if kind not in self._allowed:
            raise TypeError(f"{kind.__name__} is not an event this side sends")
        if self.next_seq > MAX_SEQ:
            raise SessionStateError(f"seq would pass {MAX_SEQ}: the session cannot send more")
        message = kind(seq=self.next_seq, ts=self.ts(now), session_id=self.session_id, **fields)
        data = encode(message)  # type: ignore[arg-type]  # kind is checked against the union
        self.next_seq += 1
        return message, data

    def ts(self, now: float) -> datetime:
        return _timestamp(self.epoch + now)


class _FrameWriter:
    """Builds one direction's frames: frame_seq +1 from 0, rtp_timestamp +320 (mod 2^32)."""

    def __init__(self, direction: FrameDirection) -> None:
        self.direction = direction
        self.frame_seq = 0
        self.rtp_timestamp = 0

    def build(
        self, pcm: bytes | bytearray | memoryview, flags: int, rtp_timestamp: int | None
    ) -> bytes:
        rtp = self.rtp_timestamp if rtp_timestamp is None else rtp_timestamp
        data = encode_frame(
            AudioFrame(
                direction=self.direction,
                flags=flags,
                frame_seq=self.frame_seq,
                rtp_timestamp=rtp,
                pcm=pcm,
            )
        )
        self.frame_seq = (self.frame_seq + 1) % FRAME_SEQ_MODULUS
        self.rtp_timestamp = (rtp + SAMPLES_PER_FRAME) % RTP_TIMESTAMP_MODULUS
        return data


class _FrameOrder:
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


# ----------------------------------------------------------------------------- client


class ClientCore:
    """The client side of one OVP session, across the connections that carry it.

    It keeps the outbound seq (never back, also across a resume), the last server seq it
    processed (replayed duplicates are dropped), the session's ``session.start`` and the frame
    counters, and judges every server event and frame.
    """

    def __init__(self, session_id: str, *, epoch: float) -> None:
        self.session_id = session_id
        self.session_start: SessionStart | None = None
        self.last_server_seq: int | None = None
        self.over: SessionOver | None = None
        self.linked = False
        self._stamper = _Stamper(session_id, epoch, _CLIENT_TYPES)
        self._frames_out = _FrameWriter(FrameDirection.CLIENT_TO_SERVER)
        self._frames_in = _FrameOrder()
        self._fatal: Error | None = None

    @property
    def next_seq(self) -> int:
        """The seq of the next event this client sends."""
        return self._stamper.next_seq

    @property
    def live(self) -> bool:
        """Whether events and audio can be sent now (linked, started, not over)."""
        return self.linked and self.session_start is not None and self.over is None

    def connected(self, now: float) -> list[ClientOutput]:
        """A connection opened: wait for ``session.start``, or resume a started session."""
        if self.over is not None:
            raise SessionStateError("the session is over")
        self.linked = True
        if self.session_start is None or self.last_server_seq is None:
            return []
        message, data = self._stamper.build(
            SessionResume, {"last_server_seq": self.last_server_seq}, now
        )
        return [Sent(message), SendText(data)]

    def receive_text(self, data: bytes | str, now: float) -> list[ClientOutput]:
        """Judge one text message from the gateway."""
        if self.over is not None:
            return [Ignored("a text message after the session was over")]
        try:
            message = decode(data, sender="server")
            seq = self._envelope_seq(message)
        except ProtocolError as exc:
            return self._reject(exc)
        if self.session_start is None:
            return self._before_start(message, seq)
        if self.last_server_seq is not None and seq <= self.last_server_seq:
            return [Ignored(f"server seq {seq} already processed (a replayed duplicate)")]
        if isinstance(message, SessionStart):
            return self._fail(
                ErrorCode.OVP_EVENT_SCHEMA_INVALID,
                "session.start again on a started session (the gateway lost it)",
            )
        self.last_server_seq = seq
        if isinstance(message, UnknownMessage):  # forward compatibility: counted, not delivered
            return [Ignored(f"server event of unknown type {message.type!r}")]
        out: list[ClientOutput] = [ServerEvent(message)]
        if isinstance(message, Error):
            out += self._on_error(message)
        elif isinstance(message, SessionEnd):
            code = message.error_code if isinstance(message.error_code, str) else None
            self.over = SessionOver(message, code, message.reason)
            out += [Close(CloseCode.NORMAL), self.over]
        return out

    def receive_binary(
        self, data: bytes | bytearray | memoryview, now: float
    ) -> list[ClientOutput]:
        """Judge one binary message (an audio frame) from the gateway."""
        if self.session_start is None or self.over is not None:
            return [Ignored("an audio frame outside the session")]
        try:
            frame = decode_frame(data, expected_direction=FrameDirection.SERVER_TO_CLIENT)
        except ProtocolError as exc:
            return [Rejected(exc)]
        problem = self._frames_in.accept(frame.frame_seq)
        if problem is not None:
            return [Rejected(ProtocolError(ErrorCode.OVP_SEQ_REGRESSION, problem, path="frame"))]
        return [AudioIn(frame)]

    def send(
        self, kind: type[Message], fields: Mapping[str, Any], now: float
    ) -> list[ClientOutput]:
        """Stamp and encode one client event; ``[Sent(message), SendText(data)]``, or a close
        when the seq would pass its bound.

        Raises :class:`SessionStateError` unless :attr:`live`, ``TypeError`` for a type the client
        does not send (or session.resume, which the core sends itself), and the generated
        encoder's :class:`~voxwire.ovp.ProtocolError` for a field that breaks the spec.
        """
        if kind is SessionResume:
            raise TypeError("session.resume is sent by the client itself on a reconnect")
        if not self.live:
            raise SessionStateError("no live session: not connected, not started or over")
        try:
            message, data = self._stamper.build(kind, fields, now)
        except SessionStateError as exc:  # the seq would pass its bound: close
            return [Close(CloseCode.NORMAL, "seq exhausted"), *self._over(None, str(exc))]
        return [Sent(message), SendText(data)]

    def send_audio(
        self,
        pcm: bytes | bytearray | memoryview,
        now: float,
        *,
        flags: int = 0,
        rtp_timestamp: int | None = None,
    ) -> list[ClientOutput]:
        """One 20 ms frame of caller audio; ``[]`` while the link is down (audio is never replayed).

        frame_seq advances either way, so a gap shows the loss. ``rtp_timestamp`` defaults to a
        counter of 320 per frame from 0 (a softphone with no RTP leg).
        """
        if self.session_start is None or self.over is not None:
            raise SessionStateError("audio flows only between session.start and the end")
        data = self._frames_out.build(pcm, flags, rtp_timestamp)
        return [SendBinary(data)] if self.linked else []

    def link_lost(self, now: float) -> list[ClientOutput]:
        """The connection is gone: resumable until ``now`` + the resume window, or over."""
        self.linked = False
        if self.over is not None:
            return []
        if self.session_start is None:
            return self._over(None, "the connection closed before session.start")
        if self._fatal is not None:
            return self._over(self._fatal.code, self._fatal.message)
        return [Dropped(now + _WINDOW)]

    def close(self) -> list[ClientOutput]:
        """The application hangs up: close with 1000 (the gateway keeps the session 30 s)."""
        if self.over is not None:
            return []
        return [
            Close(CloseCode.NORMAL, "closed by the client"),
            *self._over(None, "closed by the client"),
        ]

    def give_up(self, detail: str) -> list[ClientOutput]:
        """No connection could resume the session in time (or the application closed it)."""
        if self.over is not None:
            return []
        return self._over(ErrorCode.OVP_RESUME_EXPIRED, detail)

    def _envelope_seq(self, message: ServerMessage | UnknownMessage) -> int:
        """The seq of a decoded event, after the envelope checks the decoder leaves to us."""
        if isinstance(message, UnknownMessage):
            # The decoder keeps an unknown event whole; its envelope still has to hold.
            seq = message.data.get("seq")
            session_id = message.data.get("session_id")
            if type(seq) is not int or not 0 <= seq <= MAX_SEQ:
                raise ProtocolError(
                    ErrorCode.OVP_EVENT_SCHEMA_INVALID,
                    f"seq is {seq!r}, not an integer in 0..{MAX_SEQ}",
                    path="$.seq",
                    message_type=message.type,
                )
        else:
            seq, session_id = message.seq, message.session_id
        if session_id != self.session_id:
            raise ProtocolError(
                ErrorCode.OVP_EVENT_SCHEMA_INVALID,
                f"the event names another session ({session_id!r})",
                path="$.session_id",
                message_type=message.type,
            )
        return seq

    def _before_start(
        self, message: ServerMessage | UnknownMessage, seq: int
    ) -> list[ClientOutput]:
        if isinstance(message, SessionStart):
            if seq != 0:
                return self._fail(
                    ErrorCode.OVP_EVENT_SCHEMA_INVALID, f"session.start has seq {seq}, not 0"
                )
            self.session_start = message
            self.last_server_seq = 0
            return [ServerEvent(message)]
        if isinstance(message, Error):
            # OVP_AUTH_FAILED: the only event of the connection.
            self.last_server_seq = seq
            return [ServerEvent(message), *self._on_error(message)]
        return self._fail(
            ErrorCode.OVP_EVENT_SCHEMA_INVALID, f"{message.type} before session.start"
        )

    def _on_error(self, error: Error) -> list[ClientOutput]:
        if error.recoverable:
            return []
        self._fatal = error
        if error.code in (ErrorCode.OVP_AUTH_FAILED, ErrorCode.OVP_RESUME_EXPIRED):
            return self._over(error.code, error.message)  # the gateway closes; no session.end
        return []  # session.end follows

    def _reject(self, error: ProtocolError) -> list[ClientOutput]:
        if self.session_start is None:
            return [Rejected(error), *self._fail(error.code, _describe(error))]
        return [Rejected(error)]

    def _fail(self, code: str, detail: str) -> list[ClientOutput]:
        """A gateway that breaks the protocol where the session cannot go on: close the link."""
        return [Close(_PROTOCOL_ERROR_CLOSE_CODE, "protocol violation"), *self._over(code, detail)]

    def _over(self, code: str | None, detail: str) -> list[ClientOutput]:
        self.over = SessionOver(None, code, detail)
        return [self.over]


# ----------------------------------------------------------------------------- gateway


class _Role(Enum):
    LIVE = "live"  # the session's current link (it gets session.start or a replay)
    AWAITING_RESUME = "awaiting_resume"  # a link to a started session, before its resume


class _ReplayBuffer:
    """The server events sent, for replay: bounded by count, encoded bytes and age."""

    def __init__(self) -> None:
        self._events: deque[tuple[int, float, bytes]] = deque()
        self._bytes = 0
        self.evicted_through = -1  # highest seq no longer held

    def add(self, seq: int, data: bytes, now: float) -> None:
        self._events.append((seq, now, data))
        self._bytes += len(data)
        self.evict(now)

    def evict(self, now: float) -> None:
        events = self._events
        oldest = now - REPLAY_BUFFER_MAX_AGE_MS / 1000
        while events and (
            len(events) > REPLAY_BUFFER_MAX_EVENTS
            or self._bytes > REPLAY_BUFFER_MAX_BYTES
            or events[0][1] < oldest
        ):
            seq, _, data = events.popleft()
            self._bytes -= len(data)
            self.evicted_through = seq

    def after(self, last_seq: int, now: float) -> list[bytes] | None:
        """Every event after ``last_seq`` in order, or ``None`` if some are no longer held."""
        self.evict(now)
        if last_seq < self.evicted_through:
            return None
        return [data for seq, _, data in self._events if seq > last_seq]

    def clear(self) -> None:
        self._events.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._events)

    @property
    def size(self) -> int:
        """Encoded bytes held."""
        return self._bytes


class _FrameErrors:
    """Frame errors of one code, reported at most once per interval with a dropped count."""

    def __init__(self) -> None:
        self.dropped = 0
        self.last_detail = ""
        self.next_report = float("-inf")

    def due(self, now: float) -> bool:
        return self.dropped > 0 and now >= self.next_report

    @property
    def deadline(self) -> float | None:
        return self.next_report if self.dropped > 0 else None


@dataclass(frozen=True, slots=True)
class _Quality:
    packet_loss_pct: float
    jitter_ms: float
    rtt_ms: float
    mos: float


class GatewayCore:
    """The gateway side of one OVP session, across the connections that carry it.

    The application starts the session (:meth:`start`), emits events (:meth:`send`), audio
    (:meth:`send_audio`), errors (:meth:`fail`) and the end (:meth:`end`), and supplies the
    values of the 5 s quality and cost events (:meth:`set_quality`, :meth:`set_cost`). The core
    checks every client event and frame, applies ``session.update`` patches (``accept_patch``
    may refuse one with a reason), keeps the replay buffer, and resumes or refuses a reconnect.

    Args:
        session_id: The session (the endpoint path's id, checked against the token).
        epoch: Wall-clock seconds at ``now == 0``, for the ``ts`` of every event.
        accept_patch: Judges a well-formed patch: ``None`` to apply it, or why it is refused
            (answered with ``OVP_SESSION_UPDATE_REJECTED``).
    """

    def __init__(
        self,
        session_id: str,
        *,
        epoch: float,
        accept_patch: Callable[[SessionPatch], str | None] | None = None,
    ) -> None:
        self.session_id = session_id
        self.agent: AgentConfig | None = None
        self.caller_context: dict[str, Any] | None = None
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.over: SessionOver | None = None
        self.dropped_at: float | None = None
        self.current_link: int | None = None
        self._accept_patch = accept_patch
        self._stamper = _Stamper(session_id, epoch, _SERVER_TYPES)
        self._links: dict[int, _Role] = {}
        self._next_link = 0
        self._last_client_seq: int | None = None
        self._replay = _ReplayBuffer()
        self._frames_out = _FrameWriter(FrameDirection.SERVER_TO_CLIENT)
        self._frames_in = _FrameOrder()
        self._frame_errors = {
            ErrorCode.OVP_AUDIO_FRAME_INVALID: _FrameErrors(),
            ErrorCode.OVP_SEQ_REGRESSION: _FrameErrors(),
        }
        self._takeover: bool | None = None  # resumable flag of the takeover in force
        self._handoff: str | None = None  # "requested" or "accepted"
        self._quality: _Quality | None = None
        self._cost: CostBreakdown | None = None
        self._next_quality: float | None = None
        self._next_cost: float | None = None
        self._counts = {"turns": 0, "tool_calls": 0, "barge_ins": 0}
        self.client_frames = 0
        self.server_frames = 0
        self.frames_unsent = 0

    # ------------------------------------------------------------------ links

    def open_link(self, now: float) -> tuple[int, list[GatewayOutput]]:
        """An authenticated connection for this session; returns its link id.

        A session not yet started takes it as its current link (the newest wins); a started or
        ended one waits on it for ``session.resume``.
        """
        link = self._next_link
        self._next_link += 1
        out: list[GatewayOutput] = []
        if self.started_at is None and self.over is None:
            if self.current_link is not None:
                out.append(ToLink(self.current_link, Close(CloseCode.NORMAL, "superseded")))
                del self._links[self.current_link]
            self._links[link] = _Role.LIVE
            self.current_link = link
            self.dropped_at = None
        else:
            self._links[link] = _Role.AWAITING_RESUME
        return link, out

    def link_lost(self, link: int, now: float) -> list[GatewayOutput]:
        """Connection ``link`` is gone (close frame, TCP error or missed pong)."""
        self._links.pop(link, None)
        if link != self.current_link:
            return []
        self.current_link = None
        if self.over is not None:
            return []
        self.dropped_at = now
        return [LinkDropped(link, now)]

    # ------------------------------------------------------------------ application

    def start(self, call: CallInfo, agent: AgentConfig, now: float) -> list[GatewayOutput]:
        """Send ``session.start`` (seq 0) with the call, the agent and the audio invariants."""
        if self.started_at is not None or self.over is not None:
            raise SessionStateError("the session was already started")
        self.agent = agent
        self.started_at = now
        self._next_quality = self._next_cost = now + _CADENCE
        return self._emit(
            SessionStart,
            {
                "protocol_version": PROTOCOL_VERSION,
                "call": call,
                "agent": agent,
                "audio": AUDIO_FORMAT,
            },
            now,
        )

    def send(
        self, kind: type[Message], fields: Mapping[str, Any], now: float
    ) -> list[GatewayOutput]:
        """Stamp, buffer and route one server event; ``[Sent(message), ToLink(...)?]``.

        While the session has no link the event is only buffered, for the replay. ``start``,
        ``fail`` and ``end`` send session.start, error and session.end.
        """
        if kind in (SessionStart, Error, SessionEnd):
            raise TypeError(f"send {kind.__name__} with start(), fail() or end()")
        self._require_live()
        return self._emit(kind, fields, now)

    def send_audio(
        self, pcm: bytes | bytearray | memoryview, now: float, *, flags: int = 0
    ) -> list[GatewayOutput]:
        """One 20 ms frame of agent audio; dropped (frame_seq still advances) while unlinked."""
        self._require_live()
        data = self._frames_out.build(pcm, flags, None)
        if self.current_link is None:
            self.frames_unsent += 1
            return []
        self.server_frames += 1
        return [ToLink(self.current_link, SendBinary(data))]

    def fail(
        self,
        code: str,
        message: str,
        now: float,
        *,
        recoverable: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> list[GatewayOutput]:
        """Send an ``error``; an unrecoverable one is followed by ``session.end``.

        The recoverable flag of a code of the error table is the table's; a code of the
        application's own needs ``recoverable``. The tool codes ride ``agent.tool.error``, and
        the handshake and resume codes are the core's own.
        """
        self._require_live()
        if code in _TOOL_CODES:
            raise ValueError(f"{code} is sent as the code of an agent.tool.error")
        if code in _OWN_CODES:
            raise ValueError(f"{code} is sent by the gateway itself")
        if code in RECOVERABLE:
            table = RECOVERABLE[ErrorCode(code)]
            if recoverable not in (None, table):
                raise ValueError(f"{code} is recoverable: {str(table).lower()} by the spec")
            recoverable = table
        elif recoverable is None:
            raise ValueError(f"{code} is not in the error table: say whether it is recoverable")
        fields: dict[str, Any] = {"code": code, "message": message, "recoverable": recoverable}
        if details:
            fields["details"] = details
        if recoverable:
            return self._emit(Error, fields, now)
        out = self._stamp(Error, fields, now)
        return out + self.end(_END_REASONS.get(code, SessionEndReason.ERROR), now, error_code=code)

    def end(self, reason: str, now: float, *, error_code: str | None = None) -> list[GatewayOutput]:
        """Send ``session.end`` with the final stats and close with 1000; the session is over."""
        self._require_live()
        assert self.started_at is not None
        duration = min(MAX_ELAPSED_MS, max(0, round((now - self.started_at) * 1000)))
        cost = self._cost or CostBreakdown(
            llm_usd_micros=0, stt_usd_micros=0, tts_usd_micros=0, voice_termination_usd_micros=0
        )
        stats = FinalStats(
            duration_ms=duration,
            client_frames=self.client_frames,
            server_frames=self.server_frames,
            total_cost_usd_micros=_total(cost),
            cost_breakdown=cost,
            **self._counts,
        )
        fields: dict[str, Any] = {"reason": reason, "stats": stats}
        if error_code is not None:
            fields["error_code"] = error_code
        out = self._stamp(SessionEnd, fields, now)
        self.ended_at = now
        sent = out[0]
        assert isinstance(sent, Sent) and isinstance(sent.message, SessionEnd)
        out += self._close_links(CloseCode.NORMAL, "session ended")
        return out + self._finish(sent.message, error_code, f"ended: {reason}")

    def abort(self, detail: str, now: float) -> list[GatewayOutput]:
        """End the session without session.end (the gateway shuts down, or the app gave up
        before starting it): close every link with 1011; ``OVP_INTERNAL_ERROR``."""
        if self.over is not None:
            return []
        out: list[GatewayOutput] = [
            ToLink(link, Close(_INTERNAL_ERROR_CLOSE_CODE, "session aborted"))
            for link in self._links
        ]
        return out + self._finish(None, ErrorCode.OVP_INTERNAL_ERROR, f"aborted: {detail}")

    def set_quality(
        self, *, packet_loss_pct: float, jitter_ms: float, rtt_ms: float, mos: float
    ) -> None:
        """The values the next 5 s ``call.quality.update`` carries."""
        self._quality = _Quality(packet_loss_pct, jitter_ms, rtt_ms, mos)

    def set_cost(self, breakdown: CostBreakdown) -> None:
        """The running cost the next 5 s ``agent.cost.tick`` (and session.end's stats) carry."""
        self._cost = breakdown

    # ------------------------------------------------------------------ input

    def receive_text(self, link: int, data: bytes | str, now: float) -> list[GatewayOutput]:
        """Judge one text message from connection ``link``."""
        role = self._links.get(link)
        if role is None or (self.over is not None and role is _Role.LIVE):
            return [Ignored(f"a text message on link {link}, which carries no live session")]
        if role is _Role.AWAITING_RESUME:
            return self._first_on_resumed_link(link, data, now)
        try:
            message = decode(data, sender="client")
        except ProtocolError as exc:
            details = {"event_type": exc.message_type} if exc.message_type else None
            return self._answer(link, exc.code, _describe(exc), now, details)
        about = {"event_seq": message.seq, "event_type": message.type}
        if message.session_id != self.session_id:
            return self._answer(
                link,
                ErrorCode.OVP_EVENT_SCHEMA_INVALID,
                f"the event names another session ({message.session_id!r})",
                now,
                about,
            )
        if self._last_client_seq is not None and message.seq <= self._last_client_seq:
            return self._answer(
                link,
                ErrorCode.OVP_SEQ_REGRESSION,
                f"seq {message.seq} is not greater than {self._last_client_seq}",
                now,
                about,
            )
        problem = self._out_of_place(message)
        if problem is not None:
            return self._answer(link, ErrorCode.OVP_EVENT_SCHEMA_INVALID, problem, now, about)
        if isinstance(message, SessionUpdate):
            refusal = self._accept_patch(message.patch) if self._accept_patch else None
            if refusal is not None:
                return self._answer(
                    link, ErrorCode.OVP_SESSION_UPDATE_REJECTED, refusal, now, about
                )
            self._apply(message.patch)
        self._last_client_seq = message.seq
        self._track_client(message)
        return [ClientEvent(message)]

    def receive_binary(
        self, link: int, data: bytes | bytearray | memoryview, now: float
    ) -> list[GatewayOutput]:
        """Judge one binary message (an audio frame) from connection ``link``."""
        if link != self.current_link or self.started_at is None or self.over is not None:
            return [Ignored("an audio frame before the session started or resumed")]
        try:
            frame = decode_frame(data, expected_direction=FrameDirection.CLIENT_TO_SERVER)
        except ProtocolError as exc:
            return self._frame_error(ErrorCode.OVP_AUDIO_FRAME_INVALID, _describe(exc), now)
        problem = self._frames_in.accept(frame.frame_seq)
        if problem is not None:
            return self._frame_error(ErrorCode.OVP_SEQ_REGRESSION, problem, now)
        self.client_frames += 1
        return [AudioIn(frame)]

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> list[GatewayOutput]:
        """Fire what is due: the resume window's end, frame error reports, the 5 s events."""
        out: list[GatewayOutput] = []
        if self.over is None and self.dropped_at is not None and now - self.dropped_at > _WINDOW:
            out += self._expire(now)
        if self.over is not None or self.started_at is None:
            return out
        for code, errors in self._frame_errors.items():
            if errors.due(now):
                out += self._report_frames(code, errors, now)
        if self._next_quality is not None and now >= self._next_quality:
            self._next_quality = _next_due(self._next_quality, now)
            if self._quality is not None:
                q = self._quality
                out += self._emit(
                    CallQualityUpdate,
                    {
                        "packet_loss_pct": q.packet_loss_pct,
                        "jitter_ms": q.jitter_ms,
                        "rtt_ms": q.rtt_ms,
                        "mos": q.mos,
                    },
                    now,
                )
        if self._next_cost is not None and now >= self._next_cost:
            self._next_cost = _next_due(self._next_cost, now)
            if self._cost is not None:
                out += self._emit(
                    AgentCostTick,
                    {"total_cost_usd_micros": _total(self._cost), "breakdown": self._cost},
                    now,
                )
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`tick` must be called next, or ``None``."""
        if self.over is not None:
            return None
        deadlines = []
        if self.dropped_at is not None:
            deadlines.append(self.dropped_at + _WINDOW + _WINDOW_EPSILON)
        if self.started_at is not None:
            deadlines += [e.deadline for e in self._frame_errors.values() if e.deadline is not None]
            deadlines += [t for t in (self._next_quality, self._next_cost) if t is not None]
        return min(deadlines, default=None)

    # ------------------------------------------------------------------ inspection

    @property
    def last_seq(self) -> int:
        """The seq of the last server event sent (-1 before session.start)."""
        return self._stamper.next_seq - 1

    @property
    def replay_size(self) -> tuple[int, int]:
        """Events and encoded bytes the replay buffer holds."""
        return len(self._replay), self._replay.size

    # ------------------------------------------------------------------ internals

    def _require_live(self) -> None:
        if self.started_at is None:
            raise SessionStateError("the session has not started: call start() first")
        if self.over is not None:
            raise SessionStateError(f"the session is over ({self.over.detail})")

    def _emit(
        self, kind: type[Message], fields: Mapping[str, Any], now: float, link: int | None = None
    ) -> list[GatewayOutput]:
        """Stamp one server event; the last two seqs are kept for the error and session.end."""
        if self._stamper.next_seq >= MAX_SEQ - 1:
            return self.fail(
                ErrorCode.OVP_INTERNAL_ERROR, f"the server seq would pass {MAX_SEQ}", now
            )
        return self._stamp(kind, fields, now, link)

    def _stamp(
        self, kind: type[Message], fields: Mapping[str, Any], now: float, link: int | None = None
    ) -> list[GatewayOutput]:
        """Stamp one server event, keep it for replay and write it to ``link`` (or the current)."""
        message, data = self._stamper.build(kind, fields, now)
        self._replay.add(self.last_seq, data, now)
        self._track_server(message)
        target = self.current_link if link is None else link
        out: list[GatewayOutput] = [Sent(message)]
        if target is not None:
            out.append(ToLink(target, SendText(data)))
        return out

    def _answer(
        self, link: int, code: str, message: str, now: float, details: dict[str, Any] | None
    ) -> list[GatewayOutput]:
        """A recoverable error about a client event, on the link it came from."""
        if self.started_at is None or self.over is not None:
            return [Ignored(f"{code} outside the session: {message}")]
        fields: dict[str, Any] = {"code": code, "message": message, "recoverable": True}
        if details:
            fields["details"] = details
        return self._emit(Error, fields, now, link)

    def _frame_error(self, code: ErrorCode, detail: str, now: float) -> list[GatewayOutput]:
        errors = self._frame_errors[code]
        errors.dropped += 1
        errors.last_detail = detail
        return self._report_frames(code, errors, now) if errors.due(now) else []

    def _report_frames(
        self, code: ErrorCode, errors: _FrameErrors, now: float
    ) -> list[GatewayOutput]:
        fields = {
            "code": code,
            "message": errors.last_detail,
            "recoverable": RECOVERABLE[code],
            "details": {"dropped_frames": errors.dropped},
        }
        errors.dropped = 0
        errors.next_report = now + _FRAME_REPORT_INTERVAL
        return self._emit(Error, fields, now)

    def _resume(self, link: int, resume: SessionResume, now: float) -> list[GatewayOutput]:
        last = resume.last_server_seq
        ended = self.over is not None and self.over.end is not None
        if self.over is not None and not ended:
            return self._refuse_resume(link, last, "the session is over", now)
        since = self.ended_at if ended else self.dropped_at
        if since is not None and now - since > _WINDOW:
            what = "end" if ended else "drop"
            return self._refuse_resume(
                link, last, f"{now - since:.3f} s after the {what}, more than {_WINDOW:g} s", now
            )
        if last > self.last_seq:
            return self._refuse_resume(
                link, last, f"last_server_seq {last} was never sent (last is {self.last_seq})", now
            )
        replay = self._replay.after(last, now)
        if replay is None:
            return self._refuse_resume(
                link, last, f"the events after seq {last} are no longer all held", now
            )
        replayed = [ToLink(link, SendText(data)) for data in replay]
        if ended:  # the link that carried session.end dropped: the client gets the rest, then 1000
            self._links.pop(link, None)
            closing = ToLink(link, Close(CloseCode.NORMAL, "session ended"))
            return [*replayed, closing, Resumed(link, len(replay))]
        out: list[GatewayOutput] = []
        if self.current_link is not None:
            out.append(ToLink(self.current_link, Close(CloseCode.NORMAL, "resumed elsewhere")))
            del self._links[self.current_link]
        self._links[link] = _Role.LIVE
        self.current_link = link
        self.dropped_at = None
        self._last_client_seq = resume.seq
        return [*out, *replayed, Resumed(link, len(replay))]

    def _first_on_resumed_link(
        self, link: int, data: bytes | str, now: float
    ) -> list[GatewayOutput]:
        """A connection to a started session speaks a valid session.resume first, or the resume
        is refused and the session ends (decision first-event-on-a-resumed-link): an answer
        kept in the session's stream would let a client resuming after it skip what it missed.
        """
        try:
            message = decode(data, sender="client")
        except ProtocolError as exc:
            if exc.message_type == "session.resume":
                detail = f"malformed session.resume: {_describe(exc)}"
                return self._refuse_resume(link, None, detail, now)
            detail = f"expected session.resume: {_describe(exc)}"
            return self._refuse_resume(link, None, detail, now, exc.code)
        invalid = ErrorCode.OVP_EVENT_SCHEMA_INVALID
        if not isinstance(message, SessionResume):
            detail = f"expected session.resume, got {message.type}"
            return self._refuse_resume(link, None, detail, now, invalid)
        if message.session_id != self.session_id:
            detail = f"session.resume names another session ({message.session_id!r})"
            return self._refuse_resume(link, None, detail, now, invalid)
        if self._last_client_seq is not None and message.seq <= self._last_client_seq:
            detail = f"session.resume seq {message.seq} is not greater than {self._last_client_seq}"
            return self._refuse_resume(link, None, detail, now, ErrorCode.OVP_SEQ_REGRESSION)
        return self._resume(link, message, now)

    def _refuse_resume(
        self,
        link: int,
        last: int | None,
        detail: str,
        now: float,
        code: ErrorCode = ErrorCode.OVP_RESUME_EXPIRED,
    ) -> list[GatewayOutput]:
        """An error (not kept for replay), close 1008, and the session ends."""
        seq = max(self.last_seq, -1 if last is None else last) + 1
        error = Error(
            seq=min(seq, MAX_SEQ),
            ts=self._stamper.ts(now),
            session_id=self.session_id,
            code=code,
            message=f"resume refused: {detail}",
            recoverable=False,
        )
        self._links.pop(link, None)
        out: list[GatewayOutput] = [
            Sent(error),
            ToLink(link, SendText(encode(error))),
            ToLink(link, Close(CloseCode.POLICY, "resume refused")),
        ]
        if self.over is None:
            out += self._close_links(CloseCode.POLICY, "session expired")
            out += self._finish(None, code, f"resume refused: {detail}")
        return out

    def _expire(self, now: float) -> list[GatewayOutput]:
        """The resume window passed: refuse the links still waiting, end the session."""
        waiting = [link for link, role in self._links.items() if role is _Role.AWAITING_RESUME]
        detail = f"no resume within {_WINDOW:g} s of the drop"
        out: list[GatewayOutput] = []
        for link in waiting:
            out += self._refuse_resume(link, None, detail, now)
        if self.over is None:
            out += self._finish(None, ErrorCode.OVP_RESUME_EXPIRED, f"expired: {detail}")
        return out

    def _close_links(self, current_code: int, reason: str) -> list[GatewayOutput]:
        """Close every link: the current one with ``current_code``, the waiting ones with 1008."""
        return [
            ToLink(
                link,
                Close(current_code if link == self.current_link else CloseCode.POLICY, reason),
            )
            for link in self._links
        ]

    def _finish(self, end: SessionEnd | None, code: str | None, detail: str) -> list[GatewayOutput]:
        self.over = SessionOver(end, code, detail)
        if end is None:  # after session.end the replay stays, for a client that missed the end
            self._replay.clear()
        self.dropped_at = None
        return [self.over]

    def _out_of_place(self, message: ClientMessage) -> str | None:
        """Why a valid client event does not fit the session's state, or ``None``."""
        if self.started_at is None:
            return f"{message.type} before session.start"
        if isinstance(message, SessionResume):
            return "session.resume on a connection that received session.start"
        if isinstance(message, SupervisorRelease) and self._takeover is not True:
            return "supervisor.release with no resumable supervisor.takeover in force"
        if isinstance(message, AgentHandoffAccepted) and self._handoff != "requested":
            return "agent.handoff_accepted with no pending agent.handoff_requested"
        if (
            isinstance(message, AgentHandoffCompleted | AgentHandoffFailed)
            and self._handoff is None
        ):
            return f"{message.type} with no handoff requested or accepted"
        return None

    def _track_client(self, message: ClientMessage) -> None:
        if isinstance(message, SupervisorTakeover):
            self._takeover = message.resumable
        elif isinstance(message, SupervisorRelease):
            self._takeover = None
        elif isinstance(message, AgentHandoffAccepted):
            self._handoff = "accepted"
        elif isinstance(message, AgentHandoffCompleted | AgentHandoffFailed):
            self._handoff = None

    def _track_server(self, message: Message) -> None:
        if isinstance(message, AgentHandoffRequested):
            self._handoff = "requested"
        elif isinstance(message, AgentHandoffCompleted):
            self._handoff = None
        elif isinstance(message, AgentToolInvoke):
            self._counts["tool_calls"] += 1
        elif isinstance(message, AgentBargeIn):
            self._counts["barge_ins"] += 1
        elif isinstance(message, AgentOutput) and message.final:
            self._counts["turns"] += 1

    def _apply(self, patch: SessionPatch) -> None:
        """Apply a patch atomically: every field it sets, from the next turn."""
        assert self.agent is not None
        changes = {
            name: value
            for name, value in msgspec.structs.asdict(patch).items()
            if value is not UNSET
        }
        context = changes.pop("caller_context", None)
        if context is not None:
            self.caller_context = context
        if changes:
            self.agent = msgspec.structs.replace(self.agent, **changes)


def check_session_id(session_id: str) -> str:
    """Return ``session_id`` if the endpoint path can carry it, else raise ``ValueError``."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise ValueError(
            f"not an OVP session id (1 to 128 of A-Z a-z 0-9 . _ ~ -): {session_id!r:.140}"
        )
    return session_id


def refuse_token(session_id: str, detail: str, *, epoch: float, now: float) -> list[Action]:
    """What a connection with a bad token gets: ``error`` OVP_AUTH_FAILED (seq 0), close 1008.

    The handshake has completed; no session.start and no session.end are sent.
    """
    error = Error(
        seq=0,
        ts=_timestamp(epoch + now),
        session_id=session_id,
        code=ErrorCode.OVP_AUTH_FAILED,
        message=detail,
        recoverable=False,
    )
    return [SendText(encode(error)), Close(CloseCode.POLICY, "authentication failed")]


def _total(cost: CostBreakdown) -> int:
    return (
        cost.llm_usd_micros
        + cost.stt_usd_micros
        + cost.tts_usd_micros
        + cost.voice_termination_usd_micros
    )


def _next_due(due: float, now: float) -> float:
    """The next cadence slot after ``now`` (a stall skips slots rather than bursting)."""
    due += _CADENCE
    return due if due > now else now + _CADENCE
