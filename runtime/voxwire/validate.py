"""Check a recorded session against its protocol: what ``voxwire validate`` runs.

A capture (:mod:`voxwire.capture`) is replayed message by message, in constant memory:

- Every message is decoded by the protocol's generated codec (``decode``, ``decode_frame``):
  schema and value rules, the sender's right to send the type, the message size, the frame
  header and the frame's direction.
- The messages one side receives are fed to the sans-I/O core of that side, which judges them
  as it does live, so those session rules live in one place: the OVP gateway's messages go to a
  ``ClientCore`` (session.start first with seq 0, the session id, seq regressions, frame order,
  nothing after the end), the Brisvox agent's messages to an ``EngineCore`` (the handshake
  answer first, an offered version, ``resume: true`` on a resumption, no handshake message
  after the handshake, no resumption the agent did not allow).
- The other side's core writes its messages rather than reading them, so its rules are checked
  here, with the codes and texts the cores use: the Brisvox server's seq (+1 a message), t_ms
  (never back) and resume fields; the OVP client's seq (strictly increasing), session id,
  ``last_server_seq`` (never beyond what the gateway sent) and frame order.

Each broken rule is a :class:`Violation` at its line of the capture, with the protocol's error
code. A frame_seq gap is a :class:`Note`: OVP allows it (lost audio).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Final, Protocol, TypeAlias

import msgspec
from msgspec import UNSET

from voxwire import brisvox, ovp
from voxwire.brisvox.engine_core import AgentAccepted, EngineCore, EngineState, LinkSettings
from voxwire.brisvox.outputs import BadMessage, HandshakeFailed
from voxwire.capture import CaptureError, CaptureHeader, Frame, read_capture
from voxwire.errors import ProtocolError
from voxwire.ovp._session import AudioIn, FrameOrder, SessionOver
from voxwire.ovp.client_core import ClientCore, Rejected
from voxwire.sansio import Close, Ignored

__all__ = ["CAPTURE_CODE", "Finding", "Note", "Tally", "Violation", "check_capture"]

CAPTURE_CODE: Final = "capture"
"""The code of a line that is not a capture line at all (not JSON, no ``from``...)."""


@dataclass(frozen=True, slots=True)
class Violation:
    """A rule the session broke, at ``line`` of the capture."""

    line: int
    code: str
    """The protocol's error code (``bad_message``, ``OVP_SEQ_REGRESSION``...)."""
    text: str


@dataclass(frozen=True, slots=True)
class Note:
    """Something worth knowing that breaks no rule."""

    line: int
    text: str


Finding: TypeAlias = Violation | Note


@dataclass(slots=True)
class Tally:
    """What a check has read so far."""

    messages: int = 0
    """Text messages."""
    frames: int = 0
    """Binary messages."""
    violations: int = 0


def check_capture(lines: IO[str], tally: Tally) -> tuple[CaptureHeader, Iterator[Finding]]:
    """The capture's header, and its findings in line order as it is read (``tally`` counts).

    Raises :class:`~voxwire.capture.CaptureError` for a file that is no capture.
    """
    header, frames = read_capture(lines)
    checker: _Checker = _Brisvox(header.recorded_by) if header.protocol == "brisvox" else _Ovp()
    return header, _check(frames, checker, tally)


class _Checker(Protocol):
    def text(self, frame: Frame) -> list[Finding]: ...

    def binary(self, frame: Frame) -> list[Finding]: ...


def _check(
    frames: Iterator[Frame | CaptureError], checker: _Checker, tally: Tally
) -> Iterator[Finding]:
    for frame in frames:
        if isinstance(frame, CaptureError):
            found: list[Finding] = [Violation(frame.line, CAPTURE_CODE, frame.problem)]
        elif isinstance(frame.data, str):
            tally.messages += 1
            found = checker.text(frame)
        else:
            tally.frames += 1
            found = checker.binary(frame)
        for finding in found:
            if isinstance(finding, Violation):
                tally.violations += 1
            yield finding


def _violation(frame: Frame, error: ProtocolError) -> Violation:
    return Violation(frame.line, error.code, str(error).removeprefix(f"{error.code}: "))


class _Peek(msgspec.Struct):
    """The envelope of a message that may be broken, for the texts of violations."""

    type: Any = None
    seq: Any = None
    t_ms: Any = None
    session_id: Any = None


_PEEK: Final = msgspec.json.Decoder(_Peek)


def _peek(data: str | bytes) -> _Peek:
    try:
        return _PEEK.decode(data) if isinstance(data, str) else _Peek()
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _Peek()


# -- Brisvox ------------------------------------------------------------------------------------

_BAD: Final = brisvox.ErrorCode.BAD_MESSAGE
# The replay's engine may always reconnect: whether it should is the agent's resume flag.
_REPLAY: Final = LinkSettings(reconnect_attempts=2**31, reconnect_window=float("inf"))


class _Brisvox:
    """The agent's messages through an ``EngineCore``; the server's rules here."""

    def __init__(self, recorded_by: str) -> None:
        self._recorded_by = recorded_by
        self._decode: Callable[[str | bytes], Any] = brisvox.decoder("server")
        self._engine: EngineCore | None = None
        self._last_seq: int | None = None
        self._last_t_ms = 0
        self._quiet = False
        """A message out of the handshake's order was reported: the link's others are not."""

    def text(self, frame: Frame) -> list[Finding]:
        if frame.sender == "agent":
            return self._agent(frame)
        try:
            message = self._decode(frame.data)
        except brisvox.ProtocolError as exc:
            self._count(_peek(frame.data))
            return [_violation(frame, exc)]
        return self._server(frame, message)

    def _count(self, envelope: _Peek) -> None:
        """A refused server message still took its seq and t_ms: the next one follows it."""
        if type(envelope.seq) is int:
            self._last_seq = envelope.seq
        if type(envelope.t_ms) is int:
            self._last_t_ms = max(self._last_t_ms, envelope.t_ms)

    def binary(self, frame: Frame) -> list[Finding]:
        if frame.sender == "agent":
            return self._agent(frame)
        return [Violation(frame.line, _BAD, "binary frames are not part of the protocol")]

    def _server(self, frame: Frame, message: Any) -> list[Finding]:
        line, kind = frame.line, message.type
        envelope = message.data if isinstance(message, brisvox.UnknownMessage) else None
        seq: int = envelope["seq"] if envelope else message.seq
        t_ms: int = envelope["t_ms"] if envelope else message.t_ms
        found: list[Finding] = []
        if isinstance(message, brisvox.SessionStart):
            found += self._start(frame, message)
        elif self._engine is None:
            found += self._out_of_order(line, f"{kind} before session.start, the first message")
        else:
            state = self._engine.state
            if state not in (EngineState.OPEN, EngineState.ENDING):
                found += self._out_of_order(
                    line, f"{kind} before the agent accepted (link {state.value})"
                )
            if self._last_seq is not None and seq != self._last_seq + 1:
                found.append(
                    Violation(
                        line, _BAD, f"seq {seq} after {self._last_seq}: +1 a message on a link"
                    )
                )
        if t_ms < self._last_t_ms:
            found.append(
                Violation(line, _BAD, f"t_ms {t_ms} after {self._last_t_ms}: it never goes back")
            )
        self._last_seq, self._last_t_ms = seq, t_ms
        return found

    def _out_of_order(self, line: int, text: str) -> list[Finding]:
        if self._quiet:
            return []
        self._quiet = True
        return [Violation(line, _BAD, text)]

    def _start(self, frame: Frame, start: brisvox.SessionStart) -> list[Finding]:
        line, resume = frame.line, start.resume
        found: list[Finding] = []
        self._quiet = False
        if resume is UNSET or resume is None:
            if self._engine is not None:
                found.append(Violation(line, _BAD, "session.start again, without resume"))
            if start.seq != 1:
                found.append(
                    Violation(line, _BAD, f"the call's session.start has seq {start.seq}, not 1")
                )
            if start.t_ms != 0:
                found.append(
                    Violation(line, _BAD, f"the call's session.start has t_ms {start.t_ms}, not 0")
                )
            self._engine = self._new_engine(start, frame.t)
            return found
        previous, last = resume.previous_seq, self._last_seq
        if last is not None and previous < last:
            found.append(
                Violation(
                    line, _BAD, f"resume.previous_seq {previous} is below {last}, already sent"
                )
            )
        elif last is not None and self._recorded_by == "server" and previous != last:
            found.append(
                Violation(
                    line, _BAD, f"resume.previous_seq {previous} is not {last}, the last sent"
                )
            )
        if start.seq <= previous:
            found.append(
                Violation(line, _BAD, f"seq {start.seq} is not past resume.previous_seq {previous}")
            )
        engine = self._engine
        if engine is None:  # the capture begins with a resumption
            self._engine = self._new_engine(start, frame.t)
            return found
        engine.link_lost(frame.t, "a resumption follows")
        if engine.state is EngineState.GONE:
            found.append(
                Violation(
                    line,
                    _BAD,
                    "a resumption of a call the agent cannot take up again "
                    "(no resume: true in its accept, a refused resumption, or its end command)",
                )
            )
            self._engine = self._new_engine(start, frame.t)
        else:
            engine.connected(frame.t)
        return found

    @staticmethod
    def _new_engine(start: brisvox.SessionStart, now: float) -> EngineCore:
        engine = EngineCore(
            session_id=start.session_id,
            agent=start.agent,
            now=now,
            capabilities=start.capabilities,
            settings=_REPLAY,
            versions=tuple(start.versions),
        )
        engine.connected(now)
        return engine

    def _agent(self, frame: Frame) -> list[Finding]:
        engine, line, data = self._engine, frame.line, frame.data
        if engine is None:
            return self._out_of_order(line, "the agent spoke before session.start")
        state = engine.state
        if isinstance(data, str):
            outputs = engine.receive_text(data, frame.t)
        else:
            outputs = engine.receive_binary(data, frame.t)
        found: list[Finding] = []
        for out in outputs:
            if isinstance(out, BadMessage):
                found.append(_violation(frame, out.error))
            elif isinstance(out, HandshakeFailed) and out.rejected is None:
                code = _handshake_code(data)
                found.append(Violation(line, code, out.reason.replace(f"{code}: ", "", 1)))
            elif isinstance(out, AgentAccepted):
                for problem in out.problems:  # a refused tool, an unknown event type...
                    code, _, text = problem.partition(": ")
                    found.append(Violation(line, code, text))
            elif isinstance(out, Ignored) and state not in (
                EngineState.OPEN,
                EngineState.ENDING,
            ):
                found += self._out_of_order(line, f"{out.what} (the handshake failed)")
        return found


def _handshake_code(data: str | bytes) -> str:
    """The code of a first agent message that failed the handshake."""
    if isinstance(data, bytes):
        return _BAD
    try:
        message = brisvox.decode(data, "agent")
    except brisvox.ProtocolError as exc:
        return exc.code
    if isinstance(message, brisvox.SessionAccept):
        return brisvox.ErrorCode.INVALID_ARGUMENT  # a version not offered, no resume: true
    return _BAD


# -- OVP ----------------------------------------------------------------------------------------

_SCHEMA: Final = ovp.ErrorCode.OVP_EVENT_SCHEMA_INVALID
_REGRESSION: Final = ovp.ErrorCode.OVP_SEQ_REGRESSION
_FRAME: Final = ovp.ErrorCode.OVP_AUDIO_FRAME_INVALID


class _Gap:
    """Notes the frames one direction skipped (loss, which OVP allows)."""

    def __init__(self) -> None:
        self.last: int | None = None

    def note(self, line: int, frame_seq: int) -> Note | None:
        last, self.last = self.last, frame_seq
        if last is None:
            return None
        lost = (frame_seq - last - 1) % ovp.FRAME_SEQ_MODULUS
        if lost == 0:
            return None
        return Note(
            line, f"frame_seq {frame_seq} after {last}: {lost} frame{'' if lost == 1 else 's'} lost"
        )


@dataclass(slots=True)
class _Ovp:
    """The gateway's messages through a ``ClientCore``; the client's rules here."""

    client: ClientCore | None = None
    failed: bool = False
    """The core failed the session's start: what follows is not judged again."""
    early: bool = False
    """A client message before session.start was reported: the others are not."""
    last_client_seq: int | None = None
    max_server_seq: int = -1
    client_frames: FrameOrder = field(default_factory=FrameOrder)
    gaps: dict[str, _Gap] = field(default_factory=lambda: {"server": _Gap(), "client": _Gap()})
    decode: Callable[[str | bytes], Any] = field(default_factory=lambda: ovp.decoder("client"))

    def text(self, frame: Frame) -> list[Finding]:
        return self._server(frame) if frame.sender == "server" else self._client(frame)

    def binary(self, frame: Frame) -> list[Finding]:
        if frame.sender == "server":
            return self._server(frame)
        line, data = frame.line, frame.data
        assert isinstance(data, bytes)
        if self._start() is None:
            return self._early(Violation(line, _FRAME, "an audio frame before session.start"))
        try:
            audio = ovp.decode_frame(data, expected_direction=ovp.FrameDirection.CLIENT_TO_SERVER)
        except ovp.ProtocolError as exc:
            return [_violation(frame, exc)]
        problem = self.client_frames.accept(audio.frame_seq)
        if problem is not None:
            return [Violation(line, _REGRESSION, problem)]
        note = self.gaps["client"].note(line, audio.frame_seq)
        return [note] if note else []

    def _early(self, violation: Violation) -> list[Finding]:
        """A client message before session.start: the first one is reported."""
        if self.failed or self.early:
            return []
        self.early = True
        return [violation]

    def _start(self) -> ovp.SessionStart | None:
        return None if self.client is None else self.client.session_start

    def _server(self, frame: Frame) -> list[Finding]:
        data, line = frame.data, frame.line
        peek = _peek(data)
        if self.client is None:
            session_id = peek.session_id if isinstance(peek.session_id, str) else ""
            self.client = ClientCore(session_id, epoch=0.0)
            self.client.connected(frame.t)
        core = self.client
        over, last = core.over, core.last_server_seq
        if isinstance(data, str):
            outputs = core.receive_text(data, frame.t)
            if isinstance(peek.seq, int):
                self.max_server_seq = max(self.max_server_seq, peek.seq)
        else:
            outputs = core.receive_binary(data, frame.t)
        broke = any(
            isinstance(o, Close) and o.code == ovp.CloseCode.PROTOCOL_ERROR for o in outputs
        )
        found: list[Finding] = []
        for out in outputs:
            if isinstance(out, Rejected):
                found.append(_violation(frame, out.error))
            elif isinstance(out, SessionOver) and broke:
                self.failed = True
                if not found and out.code is not None:  # not said by Rejected already
                    found.append(Violation(line, out.code, out.detail))
            elif isinstance(out, AudioIn):
                note = self.gaps["server"].note(line, out.frame.frame_seq)
                found += [note] if note else []
            elif isinstance(out, Ignored) and not self.failed:
                if isinstance(data, bytes):
                    found.append(Violation(line, _FRAME, out.what))
                elif over is not None:
                    found.append(
                        Violation(line, _SCHEMA, f"{peek.type} after the session was over")
                    )
                elif core.last_server_seq == last:  # else an unknown type, which is no error
                    found.append(
                        Violation(line, _REGRESSION, f"seq {peek.seq} is not greater than {last}")
                    )
        return found

    def _client(self, frame: Frame) -> list[Finding]:
        line = frame.line
        try:
            message = self.decode(frame.data)
        except ovp.ProtocolError as exc:
            return [_violation(frame, exc)]
        found: list[Finding] = []
        start = self._start()
        if start is None:
            found += self._early(Violation(line, _SCHEMA, f"{message.type} before session.start"))
        elif message.session_id != start.session_id:
            found.append(
                Violation(
                    line, _SCHEMA, f"the event names another session ({message.session_id!r})"
                )
            )
        if self.last_client_seq is not None and message.seq <= self.last_client_seq:
            found.append(
                Violation(
                    line,
                    _REGRESSION,
                    f"seq {message.seq} is not greater than {self.last_client_seq}",
                )
            )
        else:
            self.last_client_seq = message.seq
        if isinstance(message, ovp.SessionResume) and self.client is not None:
            last = message.last_server_seq
            if last > self.max_server_seq:
                found.append(
                    Violation(
                        line,
                        ovp.ErrorCode.OVP_RESUME_EXPIRED,
                        f"last_server_seq {last} was never sent (last is {self.max_server_seq})",
                    )
                )
            else:
                self.client.last_server_seq = last  # the gateway replays the events after it
        return found
