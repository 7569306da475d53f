"""The session's events beside the stream: the client's judged, the gateway's counted. Not
public: :mod:`voxwire.ovp.gateway_core` is.

A client event on the link that carries the session is judged in this order
(:meth:`Events.judge`): it decodes; it names the session; a ``session.resume`` on the link that
carried the session's start resumes a session this gateway does not hold (a restarted gateway:
refused, never stitched on); its seq grows; it fits the session (nothing before
``session.start``, a ``supervisor.release`` needs a resumable takeover in force, an
``agent.handoff_accepted`` a pending request, a completed or failed handoff one requested or
accepted); and the application takes a ``session.update``'s patch. The events the gateway sends
are counted for ``session.end``'s stats, and an error the application sends follows the spec's
error table (:func:`application_error`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from voxwire.ovp import (
    CARRIED_BY_AGENT_TOOL_ERROR,
    RAISED_BY_PROTOCOL,
    RECOVERABLE,
    AgentBargeIn,
    AgentHandoffAccepted,
    AgentHandoffCompleted,
    AgentHandoffFailed,
    AgentHandoffRequested,
    AgentOutput,
    AgentToolInvoke,
    ClientMessage,
    CostBreakdown,
    ErrorCode,
    FinalStats,
    Message,
    ProtocolError,
    SessionPatch,
    SessionResume,
    SessionUpdate,
    SupervisorRelease,
    SupervisorTakeover,
    decode,
)
from voxwire.ovp._gateway_refusals import Refusal
from voxwire.ovp._session import describe
from voxwire.ovp.gateway_periodic import NO_COST, total_cost

__all__ = ["Answer", "ClientEvent", "Events", "application_error"]


class ClientEvent(msgspec.Struct, frozen=True):
    """A client event the gateway accepted, for the gateway's application."""

    message: ClientMessage


@dataclass(frozen=True, slots=True)
class Answer:
    """A client event refused: answered with a recoverable ``error`` on the stream."""

    code: str
    detail: str
    details: dict[str, Any] | None = None


class Events:
    """What the gateway judges of one session's client events, and counts of its own.

    Args:
        session_id: The session every event must name.
        accept_patch: Judges a well-formed patch: ``None`` to apply it, or why it is refused.
    """

    def __init__(
        self, session_id: str, accept_patch: Callable[[SessionPatch], str | None] | None
    ) -> None:
        self._session_id = session_id
        self._accept_patch = accept_patch
        self.last_client_seq: int | None = None
        """The seq of the last client event accepted (or of the resume that took a link)."""
        self._takeover: bool | None = None  # resumable flag of the takeover in force
        self._handoff: str | None = None  # "requested" or "accepted"
        self._counts = {"turns": 0, "tool_calls": 0, "barge_ins": 0}

    def judge(
        self, data: bytes | str, *, started: bool, on_start_link: bool
    ) -> ClientMessage | Answer | Refusal:
        """A text message on the link that carries the session: the client event, accepted
        (its seq is taken, what it puts in force is kept), or why it is not."""
        try:
            message = decode(data, sender="client")
        except ProtocolError as exc:
            details = {"event_type": exc.message_type} if exc.message_type else None
            return Answer(exc.code, describe(exc), details)
        about = {"event_seq": message.seq, "event_type": message.type}
        invalid = ErrorCode.OVP_EVENT_SCHEMA_INVALID
        if message.session_id != self._session_id:
            return Answer(
                invalid, f"the event names another session ({message.session_id!r})", about
            )
        if isinstance(message, SessionResume) and (not started or on_start_link):
            detail = f"this gateway does not hold session {self._session_id!r} (it started anew)"
            return Refusal(detail, last=message.last_server_seq)
        last = self.last_client_seq
        if last is not None and message.seq <= last:
            detail = f"seq {message.seq} is not greater than {last}"
            return Answer(ErrorCode.OVP_SEQ_REGRESSION, detail, about)
        problem = self._out_of_place(message) if started else f"{message.type} before session.start"
        if problem is not None:
            return Answer(invalid, problem, about)
        if isinstance(message, SessionUpdate) and self._accept_patch is not None:
            refused = self._accept_patch(message.patch)
            if refused is not None:
                return Answer(ErrorCode.OVP_SESSION_UPDATE_REJECTED, refused, about)
        self.last_client_seq = message.seq
        self._keep(message)
        return message

    def sent(self, message: Message) -> None:
        """A server event the gateway stamped."""
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

    def final_stats(
        self,
        duration_ms: int,
        client_frames: int,
        server_frames: int,
        cost: CostBreakdown | None,
    ) -> FinalStats:
        """``session.end``'s stats, with the running cost the application set (or none)."""
        cost = cost or NO_COST
        return FinalStats(
            duration_ms=duration_ms,
            client_frames=client_frames,
            server_frames=server_frames,
            total_cost_usd_micros=total_cost(cost),
            cost_breakdown=cost,
            **self._counts,
        )

    def _out_of_place(self, message: ClientMessage) -> str | None:
        """Why a valid client event of a started session does not fit it, or ``None``."""
        if isinstance(message, SessionResume):
            return "session.resume on a connection that already resumed"
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

    def _keep(self, message: ClientMessage) -> None:
        """What an accepted client event puts in force."""
        if isinstance(message, SupervisorTakeover):
            self._takeover = message.resumable
        elif isinstance(message, SupervisorRelease):
            self._takeover = None
        elif isinstance(message, AgentHandoffAccepted):
            self._handoff = "accepted"
        elif isinstance(message, AgentHandoffCompleted | AgentHandoffFailed):
            self._handoff = None


def application_error(code: str, recoverable: bool | None) -> bool:
    """Whether an error the application sends with ``code`` is recoverable: the error table's
    flag for a code of it (``recoverable`` may only repeat it), else ``recoverable``, which a
    code of the application's own needs. Raises ``ValueError`` for a code the application does
    not send: the tool codes ride ``agent.tool.error``, the handshake and resume codes are the
    gateway's own."""
    if code in CARRIED_BY_AGENT_TOOL_ERROR:
        raise ValueError(f"{code} is sent as the code of an agent.tool.error")
    if code in RAISED_BY_PROTOCOL:
        raise ValueError(f"{code} is sent by the gateway itself")
    if code in RECOVERABLE:
        table = RECOVERABLE[ErrorCode(code)]
        if recoverable not in (None, table):
            raise ValueError(f"{code} is recoverable: {str(table).lower()} by the spec")
        return table
    if recoverable is None:
        raise ValueError(f"{code} is not in the error table: say whether it is recoverable")
    return recoverable
