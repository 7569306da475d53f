"""The sans-I/O gateway side of OVP: :class:`GatewayCore`, its states and their transition table.

A core owns the protocol's rules and nothing else: no socket, task, clock or logging. Every input
is a method call that carries ``now`` (seconds on the adapter's clock) and returns what happened,
in order. The gateway's core serves one session across its connections, so its actions name the
link they go to (:class:`ToLink`); ``tick(now)`` fires its deadlines and ``next_deadline()`` says
when to call it next.

```text
gateway = GatewayCore("ovps_1", epoch=...)
link, out = gateway.open_link(now)          # an authenticated connection
gateway.start(call, agent, now)             # [Sent(SessionStart(...)), ToLink(link, SendText(...))]
gateway.receive_text(link, data, now)       # [ClientEvent(..)] or [Sent(ErrorEvent(..)), ToLink]
gateway.drained(link, 1024, now)            # room for 1024 events: the next ones of the stream
```

**The stream.** Every server event is stamped here (``seq`` +1 from 0 for the whole session),
kept in the replay buffer, and written to the current link through a cursor that hands out at
most ``window`` unwritten events, then more as :meth:`GatewayCore.drained` reports room; a
replay is the same cursor set back (the private ``voxwire.ovp._gateway_stream``). Audio frames
go out only while the stream is caught up (stale audio is dropped). The 5 s quality and cost
events and the aggregated frame errors are ``voxwire.ovp.gateway_periodic``'s; the
client's events judged, and session.end's counts, ``voxwire.ovp._gateway_events``; what a
refused connection gets, ``voxwire.ovp._gateway_refusals``.

The session's state is :attr:`GatewayCore.state`, a :class:`~voxwire.ovp.machines.GatewayState`;
what may happen in each state is the spec's table :data:`~voxwire.ovp.machines.GATEWAY_MACHINE`
(state x input -> next state), and every change of state goes through
:func:`voxwire.machine.step`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias

import msgspec
from msgspec import UNSET

from voxwire.machine import step
from voxwire.ovp import (
    END_REASONS,
    MAX_ELAPSED_MS,
    MAX_SEQ,
    PROTOCOL_VERSION,
    SERVER_MESSAGE_TYPES,
    STREAM_WINDOW_EVENTS,
    AgentConfig,
    AudioFrame,
    CallInfo,
    CloseCode,
    CostBreakdown,
    ErrorCode,
    ErrorEvent,
    FrameDirection,
    Message,
    ProtocolError,
    SessionEnd,
    SessionEndReason,
    SessionPatch,
    SessionResume,
    SessionStart,
    SessionUpdate,
    decode_frame,
    encode,
)
from voxwire.ovp._gateway_events import Answer, ClientEvent, Events, application_error
from voxwire.ovp._gateway_refusals import (
    Refusal,
    read_resume,
    refusal,
    refuse_token,
    resume_refusal,
)
from voxwire.ovp._gateway_stream import LinkDropped, Resumed, Stream, ToLink
from voxwire.ovp._session import (
    AUDIO_FORMAT,
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
from voxwire.ovp.gateway_periodic import Quality, Reports
from voxwire.ovp.machines import (
    GATEWAY_ENDED,
    GATEWAY_MACHINE,
    GATEWAY_SENDING,
    GATEWAY_WINDOWED,
    GatewayInput,
    GatewayState,
)
from voxwire.sansio import Close, Ignored, SendBinary

__all__ = [
    "ClientEvent",
    "GatewayCore",
    "GatewayOutput",
    "GatewayState",
    "LinkDropped",
    "Resumed",
    "ToLink",
    "refuse_token",
]


# The window is closed (exactly 30 s is inside), so its deadline fires just after it.
_WINDOW_EPSILON: Final = 0.001


# The spec's state groups are tuples, not sets: membership by identity, without Enum.__hash__
# (a Python call on 3.11).
_LIVE: Final = GatewayState.LIVE  # bound once, as an Enum member look-up is a call on 3.11
_FROM_CLIENT: Final = int(FrameDirection.CLIENT_TO_SERVER)  # compared int to int per frame


GatewayOutput: TypeAlias = (
    ToLink | Sent | ClientEvent | AudioIn | Ignored | LinkDropped | Resumed | SessionOver
)
"""What :class:`GatewayCore` returns: actions addressed to a link, and events."""


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
        window: Events of the stream one link's queue holds at most (its event bound):
            never more are handed out before :meth:`drained` reports room.
        measure: What the session measured, for the 5 s quality events the application sets
            no values for (:class:`~voxwire.ovp.gateway_periodic.Reports` says when; without
            it, as in the conformance players' core, each event waits for the application's).
    """

    def __init__(
        self,
        session_id: str,
        *,
        epoch: float,
        accept_patch: Callable[[SessionPatch], str | None] | None = None,
        window: int = STREAM_WINDOW_EVENTS,
        measure: Callable[[float], Quality] | None = None,
    ) -> None:
        self._stamper = Stamper(session_id, epoch, SERVER_MESSAGE_TYPES)
        self._stream = Stream(self._stamper, window)
        self.session_id = session_id
        self.state = GatewayState.NEW
        self.agent: AgentConfig | None = None
        self.caller_context: dict[str, Any] | None = None
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.over: SessionOver | None = None
        self.dropped_at: float | None = None
        self.current_link: int | None = None
        self._start_link: int | None = None
        self._frames_out = FrameWriter(FrameDirection.SERVER_TO_CLIENT)
        self._frames_in = FrameOrder()
        self._reports = Reports(measure)
        self._events = Events(session_id, accept_patch)
        self.client_frames = 0
        self.server_frames = 0
        self.frames_unsent = 0

    # ------------------------------------------------------------------ links

    def open_link(self, now: float) -> tuple[int, list[GatewayOutput]]:
        """An authenticated connection for this session; returns its link id.

        A session not yet started takes it as its current link (the newest wins); a started or
        ended one waits on it for ``session.resume``; one that is over refuses it at once
        (``OVP_RESUME_EXPIRED``: decision ended-session-id-taken).
        """
        link = self._stream.open()
        if self.state is GatewayState.OVER:
            return link, self._refuse_resume(link, Refusal(self._over_detail()), now)
        out: list[GatewayOutput] = []
        if self.state is GatewayState.NEW:
            if self.current_link is not None:
                out += self._stream.cut(self.current_link, Close(CloseCode.NORMAL, "superseded"))
            self._stream_to(link, 0)
        return link, out

    def link_lost(
        self, link: int, now: float, *, answered_close: bool = False
    ) -> list[GatewayOutput]:
        """Connection ``link`` is gone (close frame, TCP error or missed pong).

        ``answered_close``: the client answered the close this side sent, so it read everything
        before it (after ``session.end``: the end was delivered).
        """
        self._stream.links.pop(link, None)
        if link != self.current_link:
            return []
        self.current_link = None
        state = self.state
        if state is GatewayState.ENDING and answered_close:
            self._go(GatewayInput.END_DELIVERED)
            self._stream.replay.clear()
            return []
        if state in (GatewayState.LIVE, GatewayState.ENDING):
            self._go(GatewayInput.LINK_LOST)
            self.dropped_at = now
            return [LinkDropped(link, now)] if state is GatewayState.LIVE else []
        return []

    def drained(self, link: int, room: int, now: float) -> list[GatewayOutput]:
        """``link``'s queue drained and has ``room`` for events: the next part of the stream."""
        return [*self._stream.drained(link, room)]

    # ------------------------------------------------------------------ application

    def start(self, call: CallInfo, agent: AgentConfig, now: float) -> list[GatewayOutput]:
        """Send ``session.start`` (seq 0) with the call, the agent and the audio invariants."""
        if self.state is not GatewayState.NEW:
            raise SessionStateError(f"the session cannot start: it is {self.state.value}")
        self._go(GatewayInput.START)
        self.agent = agent
        self.started_at = now
        self._start_link = self.current_link
        self._reports.start(now)
        out = self._emit(
            SessionStart,
            {
                "protocol_version": PROTOCOL_VERSION,
                "call": call,
                "agent": agent,
                "audio": AUDIO_FORMAT,
            },
            now,
        )
        if self.current_link is None:  # the client went away before the start: resumable
            self._go(GatewayInput.LINK_LOST)
            self.dropped_at = now
        return out

    def send(
        self, kind: type[Message], fields: Mapping[str, Any], now: float
    ) -> list[GatewayOutput]:
        """Stamp, buffer and stream one server event; ``[Sent(message), ToLink(...)?]``.

        While the session has no link the event is only buffered, for the replay. ``start``,
        ``fail`` and ``end`` send session.start, error and session.end.
        """
        if kind in (SessionStart, ErrorEvent, SessionEnd):
            raise TypeError(f"send {kind.__name__} with start(), fail() or end()")
        self._require_live()
        return self._emit(kind, fields, now)

    def send_audio(
        self, pcm: bytes | bytearray | memoryview, now: float, *, flags: int = 0
    ) -> list[GatewayOutput]:
        """One 20 ms frame of agent audio; dropped (frame_seq still advances) while the client
        is away or its link is behind on the stream."""
        if self.state is not _LIVE:
            self._require_live()
        data = self._frames_out.build(pcm, flags, None)
        link = self.current_link
        state = None if link is None else self._stream.links[link]
        if link is None or state is None or state.cut or state.next_seq < self._stamper.next_seq:
            self.frames_unsent += 1
            return []
        self.server_frames += 1
        return [ToLink(link, SendBinary(data))]

    @property
    def frame_sent(self) -> AudioFrame | None:
        """The last audio frame :meth:`send_audio` built."""
        return self._frames_out.last

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
        recoverable = application_error(code, recoverable)
        fields: dict[str, Any] = {"code": code, "message": message, "recoverable": recoverable}
        if details:
            fields["details"] = details
        if recoverable:
            return self._emit(ErrorEvent, fields, now)
        out = self._stamp(ErrorEvent, fields, now)
        reason = END_REASONS[ErrorCode(code)] if code in END_REASONS else SessionEndReason.ERROR
        return out + self.end(reason, now, error_code=code)

    def end(self, reason: str, now: float, *, error_code: str | None = None) -> list[GatewayOutput]:
        """Send ``session.end`` with the final stats and close with 1000 once it is written."""
        self._require_live()
        assert self.started_at is not None
        duration = min(MAX_ELAPSED_MS, max(0, round((now - self.started_at) * 1000)))
        stats = self._events.final_stats(
            duration, self.client_frames, self.server_frames, self._reports.cost
        )
        fields: dict[str, Any] = {"reason": reason, "stats": stats}
        if error_code is not None:
            fields["error_code"] = error_code
        out = self._stamp(SessionEnd, fields, now)
        self._go(GatewayInput.END)
        self.ended_at = now
        sent = out[0]
        assert isinstance(sent, Sent) and isinstance(sent.message, SessionEnd)
        if self.current_link is not None:  # a link waiting for its resume may still get the end
            out += self._stream.close_after(
                self.current_link, Close(CloseCode.NORMAL, "session ended")
            )
        self.over = SessionOver(sent.message, error_code, f"ended: {reason}")
        return [*out, self.over]

    def abort(self, detail: str, now: float) -> list[GatewayOutput]:
        """End the session without session.end (the gateway shuts down, or the app gave up
        before starting it): close every link with 1011; ``OVP_INTERNAL_ERROR``."""
        if self.state is GatewayState.OVER:
            return []
        out: list[GatewayOutput] = []
        out += self._stream.cut_all(Close(CloseCode.INTERNAL_ERROR, "session aborted"))
        return out + self._finish(ErrorCode.OVP_INTERNAL_ERROR, f"aborted: {detail}")

    def set_quality(
        self, *, packet_loss_pct: float, jitter_ms: float, rtt_ms: float, mos: float
    ) -> None:
        """The values the next 5 s ``call.quality.update`` carries (instead of ``measure``'s)."""
        self._reports.quality = Quality(packet_loss_pct, jitter_ms, rtt_ms, mos)

    def set_cost(self, breakdown: CostBreakdown) -> None:
        """The running cost the next 5 s ``agent.cost.tick`` (and session.end's stats) carry."""
        self._reports.cost = breakdown

    # ------------------------------------------------------------------ input

    def receive_text(self, link: int, data: bytes | str, now: float) -> list[GatewayOutput]:
        """Judge one text message from connection ``link``."""
        state = self._stream.links.get(link)
        if state is None or state.cut:
            return [Ignored(f"a text message on link {link}, which is closing")]
        if not state.streaming:  # a valid session.resume first (first-event-on-a-resumed-link)
            resume = read_resume(data, self.session_id, self._events.last_client_seq)
            if isinstance(resume, Refusal):
                return self._refuse_resume(link, resume, now)
            return self._resume(link, resume, now)
        if self.state not in (GatewayState.NEW, *GATEWAY_SENDING):
            return [Ignored(f"a text message on link {link} after session.end")]
        started = self.state is not GatewayState.NEW
        judged = self._events.judge(data, started=started, on_start_link=link == self._start_link)
        if isinstance(judged, Answer):
            return self._answer(judged.code, judged.detail, now, judged.details)
        if isinstance(judged, Refusal):
            return self._refuse_resume(link, judged, now)
        if isinstance(judged, SessionUpdate):
            self._apply(judged.patch)
        return [ClientEvent(judged)]

    def receive_binary(
        self, link: int, data: bytes | bytearray | memoryview, now: float
    ) -> list[GatewayOutput]:
        """Judge one binary message (an audio frame) from connection ``link``."""
        if link != self.current_link or self.state is not _LIVE:
            early = ErrorCode.OVP_AUDIO_FRAME_INVALID if self.state is GatewayState.NEW else None
            return [Ignored("an audio frame before the session started or resumed", early)]
        try:
            frame = decode_frame(data, _FROM_CLIENT)
        except ProtocolError as exc:
            return self._frame_error(ErrorCode.OVP_AUDIO_FRAME_INVALID, describe(exc), now)
        problem = self._frames_in.accept(frame.frame_seq)
        if problem is not None:
            return self._frame_error(ErrorCode.OVP_SEQ_REGRESSION, problem, now)
        self.client_frames += 1
        return [AudioIn(frame)]

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> list[GatewayOutput]:
        """Fire what is due: the resume window's end, frame error reports, the 5 s events."""
        out: list[GatewayOutput] = []
        if self._window_passed(now):
            out += self._expire(now)
        if self.state not in GATEWAY_SENDING:
            return out
        for kind, fields in self._reports.due(now):
            out += self._emit(kind, fields, now)
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`tick` must be called next, or ``None``."""
        deadlines = []
        if self.state in GATEWAY_WINDOWED and self.dropped_at is not None:
            deadlines.append(self.dropped_at + RESUME_WINDOW + _WINDOW_EPSILON)
        if self.state in GATEWAY_SENDING and (report := self._reports.next_deadline()) is not None:
            deadlines.append(report)
        return min(deadlines, default=None)

    # ------------------------------------------------------------------ inspection

    @property
    def last_seq(self) -> int:
        """The seq of the last server event sent (-1 before session.start)."""
        return self._stamper.next_seq - 1

    @property
    def replay_size(self) -> tuple[int, int]:
        """Events and encoded bytes the replay buffer holds."""
        return len(self._stream.replay), self._stream.replay.size

    # ------------------------------------------------------------------ internals

    def _go(self, event: GatewayInput) -> None:
        """Take the transition ``event`` from the current state (the table refuses a missing one
        with :class:`~voxwire.machine.TransitionRefused`, a ``SessionStateError``)."""
        self.state = step(GATEWAY_MACHINE, self.state, event).target

    def _require_live(self) -> None:
        if self.state is _LIVE:
            return
        if self.state is GatewayState.NEW:
            raise SessionStateError("the session has not started: call start() first")
        if self.state not in GATEWAY_SENDING:
            assert self.over is not None
            raise SessionStateError(f"the session is over ({self.over.detail})")

    def _window_passed(self, now: float) -> bool:
        return (
            self.state in GATEWAY_WINDOWED
            and self.dropped_at is not None
            and now - self.dropped_at > RESUME_WINDOW
        )

    def _over_detail(self) -> str:
        if self.over is not None and self.over.end is not None:
            return "the session ended and its session.end was delivered"
        return "the session is over" + (f" ({self.over.detail})" if self.over else "")

    # --- the stream

    def _stream_to(self, link: int, next_seq: int) -> None:
        """Make ``link`` the current link, its stream going on from ``next_seq``."""
        self._stream.follow(link, next_seq)
        self.current_link = link
        self.dropped_at = None

    def _emit(
        self, kind: type[Message], fields: Mapping[str, Any], now: float
    ) -> list[GatewayOutput]:
        """Stamp one server event; the last two seqs are kept for the error and session.end."""
        if self._stamper.next_seq >= MAX_SEQ - 1:
            return self._seq_exhausted(now)
        return self._stamp(kind, fields, now)

    def _seq_exhausted(self, now: float) -> list[GatewayOutput]:
        detail = f"the server seq would pass {MAX_SEQ}"
        out = self._stamp(
            ErrorEvent,
            {"code": ErrorCode.OVP_INTERNAL_ERROR, "message": detail, "recoverable": False},
            now,
        )
        return out + self.end(SessionEndReason.ERROR, now, error_code=ErrorCode.OVP_INTERNAL_ERROR)

    def _stamp(
        self, kind: type[Message], fields: Mapping[str, Any], now: float
    ) -> list[GatewayOutput]:
        """Stamp one server event, keep it for replay, and stream it to the current link."""
        message, data = self._stamper.build(kind, fields, now)
        self._stream.replay.add(self.last_seq, data, now)
        self._events.sent(message)
        out: list[GatewayOutput] = [Sent(message, len(data))]
        if self.current_link is not None:
            out += self._stream.pump(self.current_link)
        return out

    def _answer(
        self, code: str, message: str, now: float, details: dict[str, Any] | None
    ) -> list[GatewayOutput]:
        """A recoverable error about a client event (it goes on the stream, to its link)."""
        if self.state not in GATEWAY_SENDING:
            return [Ignored(f"{code} outside the session: {message}", code)]
        fields: dict[str, Any] = {"code": code, "message": message, "recoverable": True}
        if details:
            fields["details"] = details
        return self._emit(ErrorEvent, fields, now)

    def _frame_error(self, code: ErrorCode, detail: str, now: float) -> list[GatewayOutput]:
        report = self._reports.frame_error(code, detail, now)
        dropped: list[GatewayOutput] = [Ignored(detail, code)]  # reported at most once a second
        return dropped + self._emit(*report, now) if report is not None else dropped

    # --- resuming

    def _resume(self, link: int, resume: SessionResume, now: float) -> list[GatewayOutput]:
        last = resume.last_server_seq
        if self.state in GATEWAY_WINDOWED and self._window_passed(now):
            assert self.dropped_at is not None
            late = f"{now - self.dropped_at:.3f} s after the drop, more than {RESUME_WINDOW:g} s"
            return self._refuse_resume(link, Refusal(late, last=last), now)
        refused = resume_refusal(last, self.last_seq, self._stream.replay, now)
        if refused is not None:
            return self._refuse_resume(link, refused, now)
        out: list[GatewayOutput] = []
        if self.current_link is not None:  # a half-open link: the resume takes the session over
            out += self._stream.cut(self.current_link, Close(CloseCode.NORMAL, "resumed elsewhere"))
            self._stream.links.pop(self.current_link, None)
        ended = self.state in GATEWAY_ENDED
        self._go(GatewayInput.RESUME)
        self._stream_to(link, last + 1)
        self._events.last_client_seq = resume.seq
        out.append(Resumed(link, self.last_seq - last, resume))
        if ended:  # the client gets the rest, session.end included, then 1000
            return out + self._stream.close_after(link, Close(CloseCode.NORMAL, "session ended"))
        return out + self._stream.pump(link)

    def _refuse_resume(self, link: int, refused: Refusal, now: float) -> list[GatewayOutput]:
        """An error (not kept for replay), close 1008, and the session is over."""
        seq = max(self.last_seq, -1 if refused.last is None else refused.last) + 1
        detail = f"resume refused: {refused.detail}"
        error = ErrorEvent(
            seq=min(seq, MAX_SEQ),
            ts=self._stamper.ts(now),
            session_id=self.session_id,
            code=refused.code,
            message=detail,
            recoverable=False,
        )
        self._stream.links[link].cut = True
        data = encode(error)
        out: list[GatewayOutput] = [Sent(error, len(data))]
        out += [ToLink(link, action) for action in refusal(data, "resume refused")]
        if self.state is not GatewayState.OVER:
            out += self._stream.cut_all(Close(CloseCode.POLICY, "session expired"))
            out += self._finish(refused.code, detail)
        return out

    def _expire(self, now: float) -> list[GatewayOutput]:
        """The resume window passed: refuse the links still waiting; the session is over."""
        waiting = self._stream.waiting()
        detail = f"no resume within {RESUME_WINDOW:g} s of the drop"
        out: list[GatewayOutput] = []
        for link in waiting:
            out += self._refuse_resume(link, Refusal(detail), now)
        if self.state is not GatewayState.OVER:
            out += self._finish(
                ErrorCode.OVP_RESUME_EXPIRED, f"expired: {detail}", GatewayInput.WINDOW_PASSED
            )
        return out

    def _finish(
        self, code: str, detail: str, why: GatewayInput = GatewayInput.FAIL
    ) -> list[GatewayOutput]:
        """No more session: the replay goes; a session that had not ended fails."""
        self._go(why)
        self._stream.replay.clear()
        self.dropped_at = None
        if self.over is not None:  # ended before: the application learnt it then
            return []
        self.over = SessionOver(None, code, detail)
        return [self.over]

    # --- session.update

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
