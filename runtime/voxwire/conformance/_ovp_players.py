"""The OVP session players: a ``GatewayCore`` and a ``ClientCore`` fed a case's steps. Not
public: :mod:`voxwire.conformance.sessions` is.

Each plays its side's messages through its core's API and judges the peer's by its core
(docs/conformance.md, "Sessions"). The gateway writes every text it hands a link at once (no
back-pressure: its whole window is free again), and what it wrote that no step has shown yet
(answers, replays) waits for its step; the client keeps the session.resume it sends on a
reconnect for the step that shows it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import msgspec
from msgspec import UNSET

from voxwire import ovp
from voxwire.capture import MAX_SECONDS
from voxwire.conformance._players import (
    BROKEN_CODE,
    DONE,
    SENT,
    STAND_IN,
    Judged,
    Routed,
    Step,
    Verdict,
    detail,
    form,
    ignored,
    refused,
    sent,
    taken,
)
from voxwire.errors import ProtocolError
from voxwire.ovp._session import AudioIn, Sent, SessionOver, SessionStateError
from voxwire.ovp.client_core import ClientCore, ClientOutput, Dropped, Rejected, ServerEvent
from voxwire.ovp.gateway_core import ClientEvent, GatewayCore, GatewayOutput, Resumed, ToLink
from voxwire.sansio import Close, SendText

__all__ = ["ClientPlayer", "GatewayPlayer"]

_ENVELOPE: Final = ("type", "seq", "ts", "session_id")
_LATEST_EPOCH: Final = datetime(9999, 12, 31, tzinfo=UTC).timestamp() - MAX_SECONDS
"""The latest epoch a player gives a core: its clock then runs for a whole capture without
passing what a ``ts`` can carry (year 9999). A core's own ts is never compared with the
capture's, so a later one, which a session.start of 9999-12-31 implies, changes no verdict."""


def _session_of(first: Step | None) -> tuple[str, float]:
    """The session id of an OVP message, and the epoch its ``ts`` implies."""
    if first is None:
        return STAND_IN, 0.0
    message: Any = ovp.decode(first["text"], first["from"])
    if isinstance(message, ovp.UnknownMessage):
        raise ValueError(f"the first message is of an unknown type {message.type!r}")
    ts = datetime.fromisoformat(str(message.ts).replace("Z", "+00:00")).timestamp()
    return str(message.session_id), min(ts - float(first["t"]), _LATEST_EPOCH)


def _fields(message: Any) -> dict[str, Any]:
    """A decoded message's own fields, unset ones left out (the envelope is the core's)."""
    return {
        name: value
        for name in message.__struct_fields__
        if name not in _ENVELOPE and (value := getattr(message, name)) is not UNSET
    }


# -- the gateway --------------------------------------------------------------------------------


class GatewayPlayer(Routed):
    """An OVP ``GatewayCore`` playing the server's steps and judging the client's."""

    side = "server"

    def __init__(self, named: Step | None, opened: float | None) -> None:
        session_id, epoch = _session_of(named)
        self.core = GatewayCore(session_id, epoch=epoch)
        self.pending: list[Any] = []
        """What the core wrote to a link that no step has shown yet (answers, replays)."""
        self.link = -1
        if opened is not None:
            self.link, out = self.core.open_link(opened)
            self._written(out, opened)

    def _app(self, step: Step, t: float) -> Judged:
        if "wait" not in step:
            raise ValueError(f"the gateway plays no {form(step)}")
        out = self.core.tick(t)
        self._written(out, t)
        if not any(isinstance(o, ToLink) for o in out):
            return Judged(DONE)
        return _judge(out, self.link)

    def _receive(self, step: Step, t: float) -> Judged:
        if "binary" in step:
            out = self.core.receive_binary(self.link, step["binary"], t)
        else:
            out = self.core.receive_text(self.link, step["text"], t)
        # A replay longer than the stream window goes on as the link drains: all of it counts.
        return _judge(out + self._written(out, t), self.link)

    def _link(self, event: str, t: float) -> Judged:
        if event == "failed":
            raise ValueError("the gateway opens no connection: none of its attempts fails")
        if event == "open":
            self.link, out = self.core.open_link(t)
            self._written(out, t)
            return Judged(DONE) if not out else _judge(out, self.link)
        self._written(self.core.link_lost(self.link, t, answered_close=event == "closed"), t)
        return Judged(DONE)

    def _send(self, step: Step, t: float) -> Judged:
        core = self.core
        try:
            if "binary" in step:
                frame = ovp.decode_frame(
                    step["binary"], expected_direction=ovp.FrameDirection.SERVER_TO_CLIENT
                )
                self._written(core.send_audio(frame.pcm, t, flags=frame.flags), t)
                return Judged(SENT)
            message: Any = ovp.decode(step["text"], "server")
            if isinstance(message, ovp.UnknownMessage):  # a later version's: not this core's
                return Judged(SENT)
            found = taken(self.pending, message.type)
            if found is None:
                out = self._emit(message, t)
                self._written(out, t)
                found = taken(self.pending, message.type)
                if found is None:  # no link to write it to: kept for the resume
                    kept = (o.message for o in out if isinstance(o, Sent))
                    found = next((m for m in kept if m.type == message.type), None)
        except (ProtocolError, SessionStateError, TypeError, ValueError) as exc:
            # ValueError: an error whose code only the gateway's own rules raise
            return refused(exc, "ovp")
        if found is None:
            return refused(SessionStateError(f"the gateway writes no {message.type} now"), "ovp")
        return sent(found.seq, message.seq)

    def _emit(self, message: Any, t: float) -> list[GatewayOutput]:
        """``message`` sent through the core's API for its type."""
        core = self.core
        if isinstance(message, ovp.SessionStart):
            return core.start(message.call, message.agent, t)
        if isinstance(message, ovp.SessionEnd):
            code = message.error_code if isinstance(message.error_code, str) else None
            return core.end(message.reason, t, error_code=code)
        if isinstance(message, ovp.ErrorEvent):
            details = None if message.details is UNSET else message.details
            return core.fail(
                message.code, message.message, t, recoverable=message.recoverable, details=details
            )
        return core.send(type(message), _fields(message), t)

    def _written(self, out: list[GatewayOutput], t: float) -> list[GatewayOutput]:
        """Every text handed to a link is written at once (no back-pressure here): kept in
        ``pending`` until a step shows it. Returns what the core streamed as the link drained."""
        texts = [
            o.action.data for o in out if isinstance(o, ToLink) and isinstance(o.action, SendText)
        ]
        self.pending += [ovp.decode(data, "server") for data in texts]
        if any(
            o.link == self.link
            for o in out
            if isinstance(o, ToLink) and isinstance(o.action, SendText)
        ):
            # its queue drained at once: the whole window is free again
            streamed = self.core.drained(self.link, ovp.STREAM_WINDOW_EVENTS, t)
            return streamed + self._written(streamed, t)
        return []


def _judge(out: list[GatewayOutput], link: int) -> Judged:
    closes = [o.action for o in out if isinstance(o, ToLink) and isinstance(o.action, Close)]
    errors = [
        o.message for o in out if isinstance(o, Sent) and isinstance(o.message, ovp.ErrorEvent)
    ]
    if errors:
        verdict: Verdict = {"verdict": "error", "code": str(errors[0].code)}
        if closes:
            verdict["close"] = int(closes[0].code)
        return Judged(verdict, str(errors[0].code), errors[0].message)
    if any(isinstance(o, Resumed) for o in out):
        texts = [
            o.action.data
            for o in out
            if isinstance(o, ToLink) and o.link == link and isinstance(o.action, SendText)
        ]
        return Judged({"verdict": "replay", "seqs": [_PEEK.decode(data).seq for data in texts]})
    if closes:
        return Judged(
            {"verdict": "close", "close": int(closes[0].code)}, BROKEN_CODE["ovp"], closes[0].reason
        )
    if any(isinstance(o, ClientEvent | AudioIn) for o in out):
        return Judged({"verdict": "accepted"})
    return ignored(out)  # dropped without an answer


class _SeqPeek(msgspec.Struct):
    seq: int


_PEEK: Final = msgspec.json.Decoder(_SeqPeek)


# -- the client ---------------------------------------------------------------------------------


class ClientPlayer(Routed):
    """An OVP ``ClientCore`` playing the client's steps and judging the gateway's."""

    side = "client"

    def __init__(self, named: Step | None, opened: float | None) -> None:
        session_id, epoch = _session_of(named)
        self.core = ClientCore(session_id, epoch=epoch)
        if opened is not None:
            self.core.connected(opened)
        self.pending: list[Any] = []
        """Messages the core sent on its own (session.resume on a reconnect), not yet stepped."""
        self.resume_by: float | None = None
        """When the adapter gives up reconnecting a dropped link (the core's ``Dropped``)."""

    def _receive(self, step: Step, t: float) -> Judged:
        if "binary" in step:
            return _judge_client(self.core.receive_binary(step["binary"], t))
        return _judge_client(self.core.receive_text(step["text"], t))

    def _link(self, event: str, t: float) -> Judged:
        if event == "failed":  # the adapter tries again until its resume_by
            return Judged(DONE)
        if event != "open" or self.core.linked:
            # A new link while this one is up: the client saw it drop first (a half-open link,
            # whose drop a capture the gateway recorded does not show).
            out = self.core.link_lost(t)
            self.resume_by = next((o.resume_by for o in out if isinstance(o, Dropped)), None)
            if event != "open":
                return Judged(DONE)
        try:
            self.pending += [o.message for o in self.core.connected(t) if isinstance(o, Sent)]
        except SessionStateError as exc:
            return refused(exc, "ovp")
        self.resume_by = None
        return Judged(DONE)

    def _app(self, step: Step, t: float) -> Judged:
        """A call of the application, time passing, the client's seq skipping ahead."""
        core, linked = self.core, self.core.linked
        if step.get("call") == "hang_up":
            return _after_client(core.close(), linked)
        if "wait" in step:  # the adapter's one timer: no reconnect resumed the session in time
            due = self.resume_by is not None and t >= self.resume_by
            return _after_client(core.give_up("no reconnect in time") if due else [], linked)
        if "next_seq" in step:
            core.skip_seq(step["next_seq"])
            return Judged(DONE)
        raise ValueError(f"the client plays no {form(step)}")

    def _send(self, step: Step, t: float) -> Judged:
        try:
            return self._through_core(step, t)
        except (ProtocolError, SessionStateError, TypeError) as exc:
            return refused(exc, "ovp")

    def _through_core(self, step: Step, t: float) -> Judged:
        if "binary" in step:
            frame = ovp.decode_frame(
                step["binary"], expected_direction=ovp.FrameDirection.CLIENT_TO_SERVER
            )
            self.core.send_audio(frame.pcm, t, flags=frame.flags, rtp_timestamp=frame.rtp_timestamp)
            return Judged(SENT)
        message: Any = ovp.decode(step["text"], "client")
        if isinstance(message, ovp.SessionResume):
            found = taken(self.pending, message.type)
            if found is None:
                raise SessionStateError("session.resume without a reconnect")
            # What the client says it processed decides what the gateway replays: events the
            # capture shows as sent may have been lost in flight.
            self.core.last_server_seq = message.last_server_seq
            if _fields(found) != _fields(message):
                return Judged({"verdict": "sent", "fields": msgspec.to_builtins(_fields(found))})
        else:
            out = self.core.send(type(message), _fields(message), t)
            found = next((o.message for o in out if isinstance(o, Sent)), None)
            if found is None:  # its seq would pass the bound: the client closes instead
                shut = next(o for o in out if isinstance(o, Close))
                verdict = {"verdict": "close", "close": int(shut.code)}
                return Judged(verdict, BROKEN_CODE["ovp"], shut.reason)
        return sent(found.seq, message.seq)


def _after_client(out: list[ClientOutput], linked: bool) -> Judged:
    """What the client did on a call or a timer: closed its link (when one was up), or ended
    the session with a code it reports."""
    shut = next((o for o in out if isinstance(o, Close)), None) if linked else None
    over = next((o for o in out if isinstance(o, SessionOver) and o.code), None)
    if over is not None:
        verdict: Verdict = {"verdict": "error", "code": str(over.code)}
        if shut is not None:
            verdict["close"] = int(shut.code)
        return Judged(verdict, str(over.code), over.detail)
    if shut is not None:
        return Judged({"verdict": "close", "close": int(shut.code)})
    return Judged(DONE)


def _judge_client(out: list[ClientOutput]) -> Judged:
    closes = [o for o in out if isinstance(o, Close)]
    refusals = [(str(o.error.code), detail(o.error)) for o in out if isinstance(o, Rejected)]
    refusals += [
        (str(o.code), o.detail) for o in out if isinstance(o, SessionOver) and o.code and closes
    ]
    if refusals:
        verdict: Verdict = {"verdict": "error", "code": refusals[0][0]}
        if closes:
            verdict["close"] = int(closes[0].code)
        return Judged(verdict, *refusals[0])
    if any(isinstance(o, ServerEvent | AudioIn) for o in out):
        return Judged({"verdict": "accepted"})
    return ignored(out)
