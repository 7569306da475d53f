"""The sans-I/O client side of OVP: :class:`ClientCore`, its states and their transition table.

A core owns the protocol's rules and nothing else: no socket, task, clock or logging. Every input
is a method call that carries ``now`` (seconds on the adapter's clock) and returns what happened,
in order: actions for the adapter (:class:`~voxwire.sansio.SendText`,
:class:`~voxwire.sansio.SendBinary`, :class:`~voxwire.sansio.Close`) and events (the dataclasses
below and in :mod:`voxwire.ovp._session`).

```text
client = ClientCore("ovps_1", epoch=time.time() - clock.now())
client.connected(now)                      # [] (on a reconnect: session.resume)
client.receive_text(data, now)             # [ServerEvent(SessionStart(...))]
client.send(ovp.AgentInput, {...}, now)    # [Sent(AgentInput(seq=0, ...)), SendText(...)]
```

The session's state is :attr:`ClientCore.state`, a :class:`~voxwire.ovp.machines.ClientState`;
what may happen in each state is the spec's table :data:`~voxwire.ovp.machines.CLIENT_MACHINE`
(state x input -> next state), and every change of state goes through
:func:`voxwire.machine.step`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from voxwire.machine import step
from voxwire.ovp import (
    CLIENT_MESSAGE_TYPES,
    CLOSE_AFTER,
    MAX_SEQ,
    AudioFrame,
    CloseCode,
    ErrorCode,
    ErrorEvent,
    FrameDirection,
    Message,
    ProtocolError,
    ServerMessage,
    SessionEnd,
    SessionResume,
    SessionStart,
    UnknownMessage,
    decode,
    decode_frame,
)
from voxwire.ovp._session import (
    RESUME_WINDOW,
    AudioIn,
    FrameOrder,
    FrameWriter,
    Sent,
    SessionOver,
    SessionStateError,
    Stamper,
    describe,
)
from voxwire.ovp.machines import (
    CLIENT_MACHINE,
    CLIENT_RECEIVING,
    CLIENT_SENDING,
    ClientInput,
    ClientState,
)
from voxwire.sansio import Close, Ignored, SendBinary, SendText

__all__ = [
    "ClientCore",
    "ClientOutput",
    "ClientState",
    "Dropped",
    "Rejected",
    "ServerEvent",
]


@dataclass(frozen=True, slots=True)
class ServerEvent:
    """A server event for the client's application, each exactly once and in seq order."""

    message: ServerMessage


@dataclass(frozen=True, slots=True)
class Rejected:
    """A bad server event or frame the client dropped (the client never sends ``error``)."""

    error: ProtocolError


@dataclass(frozen=True, slots=True)
class Dropped:
    """The client's link dropped; a reconnect may resume the session until ``resume_by``."""

    resume_by: float


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


class ClientCore:
    """The client side of one OVP session, across the connections that carry it.

    It keeps the outbound seq (never back, also across a resume), the last server seq it
    processed (replayed duplicates are dropped), the session's ``session.start`` and the frame
    counters, and judges every server event and frame.
    """

    def __init__(self, session_id: str, *, epoch: float) -> None:
        self.session_id = session_id
        self.state = ClientState.IDLE
        self.session_start: SessionStart | None = None
        self.last_server_seq: int | None = None
        self.over: SessionOver | None = None
        self._stamper = Stamper(session_id, epoch, CLIENT_MESSAGE_TYPES)
        self._frames_out = FrameWriter(FrameDirection.CLIENT_TO_SERVER)
        self._frames_in = FrameOrder()
        self._fatal: ErrorEvent | None = None

    @property
    def next_seq(self) -> int:
        """The seq of the next event this client sends."""
        return self._stamper.next_seq

    @property
    def linked(self) -> bool:
        """Whether a link to the gateway is up."""
        return self.state in CLIENT_RECEIVING

    @property
    def live(self) -> bool:
        """Whether events and audio can be sent now (linked, started, not over)."""
        return self.state in CLIENT_SENDING

    def connected(self, now: float) -> list[ClientOutput]:
        """A connection opened: wait for ``session.start``, or resume a started session."""
        if self.state is ClientState.OVER:
            raise SessionStateError("the session is over")
        resuming = self.state is ClientState.DROPPED
        self._go(ClientInput.CONNECT)
        if not resuming:
            return []
        assert self.last_server_seq is not None
        message, data = self._stamper.build(
            SessionResume, {"last_server_seq": self.last_server_seq}, now
        )
        return [Sent(message, len(data)), SendText(data)]

    def receive_text(self, data: bytes | str, now: float) -> list[ClientOutput]:
        """Judge one text message from the gateway."""
        if self.state not in CLIENT_RECEIVING:
            if self._ended():
                return [
                    Ignored("a text message after session.end", ErrorCode.OVP_EVENT_SCHEMA_INVALID)
                ]
            return [Ignored(f"a text message while {self.state.value}")]
        try:
            message = decode(data, sender="server")
            seq = self._envelope_seq(message)
        except ProtocolError as exc:
            return self._reject(exc)
        if self.state is ClientState.STARTING:
            return self._before_start(message, seq)
        if isinstance(message, SessionStart):  # a duplicate of seq 0 would be a replay: it is not
            return self._fail(
                ErrorCode.OVP_RESUME_EXPIRED,
                "the gateway started the session anew (it no longer holds it): the events after"
                f" seq {self.last_server_seq} are lost",
                close=CloseCode.NORMAL,
            )
        if isinstance(message, ErrorEvent) and message.code in CLOSE_AFTER:
            # A refusal is the connection's answer, outside the seq stream: never a duplicate
            # (spec decision refusal-outside-the-stream).
            return [ServerEvent(message), *self._on_error(message)]
        if self.last_server_seq is not None and seq <= self.last_server_seq:
            return [
                Ignored(
                    f"seq {seq} is not greater than {self.last_server_seq}, already processed"
                    " (a replayed duplicate)",
                    ErrorCode.OVP_SEQ_REGRESSION,
                )
            ]
        self.last_server_seq = seq
        if isinstance(message, UnknownMessage):  # forward compatibility: counted, not delivered
            return [Ignored(f"server event of unknown type {message.type!r}")]
        out: list[ClientOutput] = [ServerEvent(message)]
        if isinstance(message, ErrorEvent):
            out += self._on_error(message)
        elif isinstance(message, SessionEnd):
            self._go(ClientInput.END)
            code = message.error_code if isinstance(message.error_code, str) else None
            self.over = SessionOver(message, code, message.reason)
            out += [Close(CloseCode.NORMAL), self.over]
        return out

    def receive_binary(
        self, data: bytes | bytearray | memoryview, now: float
    ) -> list[ClientOutput]:
        """Judge one binary message (an audio frame) from the gateway."""
        if self.state not in CLIENT_SENDING:
            if self._ended():
                return [
                    Ignored("an audio frame after session.end", ErrorCode.OVP_AUDIO_FRAME_INVALID)
                ]
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
            raise SessionStateError(f"no live session: the session is {self.state.value}")
        try:
            message, data = self._stamper.build(kind, fields, now)
        except SessionStateError as exc:  # the seq would pass its bound: close
            self._go(ClientInput.SEQ_EXHAUSTED)
            return [Close(CloseCode.NORMAL, "seq exhausted"), self._over(None, str(exc))]
        return [Sent(message, len(data)), SendText(data)]

    def skip_seq(self, next_seq: int) -> None:
        """Go on from ``next_seq``: the seqs before it are never sent (a gap the gateway accepts,
        decision seq-gaps-allowed). Never back, and at most one past :data:`~voxwire.ovp.MAX_SEQ`
        (the next send then closes); the session cases at the seq bound start there."""
        if not self._stamper.next_seq <= next_seq <= MAX_SEQ + 1:
            raise ValueError(
                f"the next seq must be in {self._stamper.next_seq}..{MAX_SEQ + 1}, not {next_seq}"
            )
        self._stamper.next_seq = next_seq

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
        if self.session_start is None or self.state is ClientState.OVER:
            raise SessionStateError("audio flows only between session.start and the end")
        data = self._frames_out.build(pcm, flags, rtp_timestamp)
        return [SendBinary(data)] if self.live else []

    @property
    def frame_sent(self) -> AudioFrame | None:
        """The last audio frame :meth:`send_audio` built."""
        return self._frames_out.last

    def link_lost(self, now: float) -> list[ClientOutput]:
        """The connection is gone: resumable until ``now`` + the resume window, or over."""
        state = self.state
        if state not in CLIENT_RECEIVING:
            return []
        self._go(ClientInput.LINK_LOST)
        if state is ClientState.STARTING:
            return [self._over(None, "the connection closed before session.start")]
        if state is ClientState.FAILING:
            assert self._fatal is not None
            return [self._over(self._fatal.code, self._fatal.message)]
        return [Dropped(now + RESUME_WINDOW)]

    def close(self) -> list[ClientOutput]:
        """The application hangs up: close with 1000 (the gateway keeps the session 30 s)."""
        if self.state is ClientState.OVER:
            return []
        self._go(ClientInput.HANG_UP)
        return [
            Close(CloseCode.NORMAL, "closed by the client"),
            self._over(None, "closed by the client"),
        ]

    def give_up(self, detail: str) -> list[ClientOutput]:
        """No connection could resume the session in time."""
        if self.state is not ClientState.DROPPED:
            return []
        self._go(ClientInput.GIVE_UP)
        return [self._over(ErrorCode.OVP_RESUME_EXPIRED, detail)]

    # ------------------------------------------------------------------ internals

    def _ended(self) -> bool:
        """Whether the gateway's ``session.end`` arrived (nothing may follow it on the link)."""
        return self.over is not None and self.over.end is not None

    def _go(self, event: ClientInput) -> None:
        """Take the transition ``event`` from the current state (the table refuses a missing one
        with :class:`~voxwire.machine.TransitionRefused`, a ``SessionStateError``)."""
        self.state = step(CLIENT_MACHINE, self.state, event).target

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
            self._go(ClientInput.START)
            self.session_start = message
            self.last_server_seq = 0
            return [ServerEvent(message)]
        if isinstance(message, ErrorEvent) and not message.recoverable:
            # OVP_AUTH_FAILED: the only event of the connection.
            self.last_server_seq = seq
            return [ServerEvent(message), *self._on_error(message)]
        return self._fail(
            ErrorCode.OVP_EVENT_SCHEMA_INVALID, f"{message.type} before session.start"
        )

    def _on_error(self, error: ErrorEvent) -> list[ClientOutput]:
        if error.recoverable:
            return []
        if error.code in CLOSE_AFTER or self.state is ClientState.STARTING:
            self._go(ClientInput.REFUSED)  # the gateway closes; no session.end
            return [self._over(error.code, error.message)]
        if self.state is ClientState.LIVE:
            self._fatal = error
            self._go(ClientInput.FATAL_ERROR)
        return []  # session.end follows

    def _reject(self, error: ProtocolError) -> list[ClientOutput]:
        if self.state is ClientState.STARTING:
            return [Rejected(error), *self._fail(error.code, describe(error))]
        return [Rejected(error)]

    def _fail(
        self, code: str, detail: str, *, close: int = CloseCode.PROTOCOL_ERROR
    ) -> list[ClientOutput]:
        """The session cannot go on with this gateway: close the link, the session is over."""
        self._go(ClientInput.BROKEN)
        reason = "protocol violation" if close == CloseCode.PROTOCOL_ERROR else "session lost"
        return [Close(close, reason), self._over(code, detail)]

    def _over(self, code: str | None, detail: str) -> SessionOver:
        self.over = SessionOver(None, code, detail)
        return self.over
