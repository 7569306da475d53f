"""What the gateway refuses a connection, outside the session's stream. Not public:
:mod:`voxwire.ovp.gateway_core` is.

A refused connection gets one ``error`` that is not kept for replay, then close 1008: a bad
token (:func:`refuse_token`: ``OVP_AUTH_FAILED``, seq 0, before any session.start), or a resume
the gateway will not take. A connection to a started session must speak a valid
``session.resume`` of that session first (:func:`read_resume`; spec decision
first-event-on-a-resumed-link), naming a ``last_server_seq`` that was sent and after which every
event is still held (:func:`resume_refusal`); the resume window is the core's.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxwire.ovp import (
    CloseCode,
    ErrorCode,
    ErrorEvent,
    ProtocolError,
    SessionResume,
    decode,
    encode,
)
from voxwire.ovp._gateway_stream import ReplayBuffer
from voxwire.ovp._session import describe, timestamp
from voxwire.sansio import Action, Close, SendText

__all__ = ["Refusal", "read_resume", "refusal", "refuse_token", "resume_refusal"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a resume is refused, and the code of the error that says so."""

    detail: str
    code: ErrorCode = ErrorCode.OVP_RESUME_EXPIRED
    last: int | None = None
    """The ``last_server_seq`` the client resumed after, when it named one (the error's seq
    follows it)."""


def refusal(error: bytes, reason: str) -> list[Action]:
    """An encoded ``error`` (outside the stream), then close 1008 with ``reason``."""
    return [SendText(error), Close(CloseCode.POLICY, reason)]


def refuse_token(session_id: str, detail: str, *, epoch: float, now: float) -> list[Action]:
    """What a connection with a bad token gets: ``error`` OVP_AUTH_FAILED (seq 0), close 1008.

    The handshake has completed; no session.start and no session.end are sent.
    """
    error = ErrorEvent(
        seq=0,
        ts=timestamp(epoch + now),
        session_id=session_id,
        code=ErrorCode.OVP_AUTH_FAILED,
        message=detail,
        recoverable=False,
    )
    return refusal(encode(error), "authentication failed")


def read_resume(
    data: bytes | str, session_id: str, last_client_seq: int | None
) -> SessionResume | Refusal:
    """The first message on a connection to a started session: a valid ``session.resume`` of
    ``session_id`` whose seq follows ``last_client_seq``, or why the resume is refused (an
    answer kept in the session's stream would let a client resuming after it skip what it
    missed)."""
    try:
        message = decode(data, sender="client")
    except ProtocolError as exc:
        if exc.message_type == SessionResume.type:
            return Refusal(f"malformed session.resume: {describe(exc)}")
        return Refusal(f"expected session.resume: {describe(exc)}", exc.code)
    invalid = ErrorCode.OVP_EVENT_SCHEMA_INVALID
    if not isinstance(message, SessionResume):
        return Refusal(f"expected session.resume, got {message.type}", invalid)
    if message.session_id != session_id:
        return Refusal(f"session.resume names another session ({message.session_id!r})", invalid)
    if last_client_seq is not None and message.seq <= last_client_seq:
        detail = f"session.resume seq {message.seq} is not greater than {last_client_seq}"
        return Refusal(detail, ErrorCode.OVP_SEQ_REGRESSION)
    return message


def resume_refusal(last: int, last_seq: int, replay: ReplayBuffer, now: float) -> Refusal | None:
    """Why a resume after ``last`` cannot be replayed (``last_seq`` is the last event sent), or
    ``None``. The replay buffer's age bound is applied first: it holds at a resume too, not on a
    send alone."""
    if last > last_seq:
        return Refusal(f"last_server_seq {last} was never sent (last is {last_seq})", last=last)
    replay.evict(now)
    if not replay.holds_after(last):
        return Refusal(f"the events after seq {last} are no longer all held", last=last)
    return None
