"""What every session player shares: a step, its verdict, and how a step reaches the player's
core. Not public: :mod:`voxwire.conformance.sessions` is.

A player (:class:`Routed`) takes each step by its form: a link event, the application's (a
call, a wait, a seq skip), a message of the side it plays (sent through its core's API), or a
message of the peer's (received by its core). The verdicts shared by every side are here:
``done``, ``sent`` (with the seq the core stamped where it differs), ``refused`` (with the rule
the core named), ``ignored`` (with the code of the drop the core blames the sender for).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Protocol

from voxwire import brisvox, ovp
from voxwire.errors import ProtocolError
from voxwire.sansio import Ignored

__all__ = [
    "BROKEN_CODE",
    "DONE",
    "LINK_STEPS",
    "SENT",
    "STAND_IN",
    "Judged",
    "Player",
    "Routed",
    "Step",
    "Verdict",
    "detail",
    "form",
    "ignored",
    "refused",
    "sent",
    "taken",
]

Verdict = dict[str, Any]
"""A step's verdict as JSON (docs/conformance.md, "Sessions")."""
Step = dict[str, Any]
"""A case's step, or a capture line: ``{"t", "from", "text"}``, ``{"t", "from", "binary"}``
(bytes) or ``{"t", "link"}``."""
BROKEN_CODE: Final = {
    "brisvox": brisvox.ErrorCode.BAD_MESSAGE,
    "ovp": ovp.ErrorCode.OVP_EVENT_SCHEMA_INVALID,
}
"""The code of a broken rule the core names no code for (a close, a refused send)."""
LINK_STEPS: Final = ("lost", "closed", "open", "failed")
"""A case's link events: a capture's (:data:`voxwire.capture.LINK_EVENTS`), and ``failed``, a
connection attempt that never opened (the sides that connect out: the client, the engine)."""
STAND_IN: Final = "session"
"""The session id of a case that names none (no message: nothing is stamped or compared)."""
DONE: Final[Verdict] = {"verdict": "done"}
SENT: Final[Verdict] = {"verdict": "sent"}


@dataclass(frozen=True, slots=True)
class Judged:
    """A step's verdict, and the rule it broke in the core's own words, if any."""

    verdict: Verdict
    code: str | None = None
    """The protocol's error code of the broken rule (a verdict ``error`` or ``close``, a
    ``refused`` send, a message the core drops as the sender's fault), else ``None``."""
    why: str = ""
    """What the core said: the refusal, the close's reason, what it dropped."""
    declined: bool = False
    """A valid session the side declined (Brisvox ``session.reject``): no rule broken."""


class Player(Protocol):
    """One side's core, fed every step of a session, its own messages and the peer's."""

    def step(self, step: Step) -> Judged: ...


class Routed(ABC):
    """A player that takes each step by its form; ``side`` is the sender it plays (a
    message's ``from``)."""

    side: ClassVar[str]

    def step(self, step: Step) -> Judged:
        t = step["t"]
        if "link" in step:
            return self._link(step["link"], t)
        if "from" not in step:
            return self._app(step, t)
        if step["from"] == self.side:
            return self._send(step, t)
        return self._receive(step, t)

    @abstractmethod
    def _link(self, event: str, t: float) -> Judged:
        """A link event: one of :data:`LINK_STEPS`."""

    @abstractmethod
    def _app(self, step: Step, t: float) -> Judged:
        """A call of the application, time passing, a seq skip; ``ValueError`` for a step the
        side does not play."""

    @abstractmethod
    def _send(self, step: Step, t: float) -> Judged:
        """A message of the side's own, sent through its core's API."""

    @abstractmethod
    def _receive(self, step: Step, t: float) -> Judged:
        """A message of the peer's, received by the core."""


def detail(error: ProtocolError) -> str:
    """The error's text without its code."""
    return str(error).removeprefix(f"{error.code}: ")


def refused(error: ProtocolError | Exception, protocol: str) -> Judged:
    """A message the sender's core would not send: its encoder or its state refuses it."""
    if isinstance(error, ProtocolError):
        return Judged({"verdict": "refused"}, error.code, detail(error))
    return Judged({"verdict": "refused"}, BROKEN_CODE[protocol], str(error))


def sent(seq: int, captured: int) -> Judged:
    """Sent, with the seq the core stamped where it differs from the captured one."""
    return Judged(SENT if seq == captured else {"verdict": "sent", "seq": seq})


def ignored(out: Sequence[object]) -> Judged:
    """Dropped without an answer; the code of the first drop the core blames the sender for."""
    blamed = next((o for o in out if isinstance(o, Ignored) and o.code is not None), None)
    if blamed is None:
        return Judged({"verdict": "ignored"})
    return Judged({"verdict": "ignored"}, blamed.code, blamed.what)


def taken(pending: list[Any], kind: str) -> Any:
    """The first message of type ``kind`` the core wrote and no step has shown yet, taken."""
    found = next((m for m in pending if m.type == kind), None)
    if found is not None:
        pending.remove(found)
    return found


def form(step: Step) -> str:
    """A step's form, for a side that does not play it."""
    kind = next((k for k in ("call", "wait", "next_seq") if k in step), None)
    return f"step {step!r:.80}" if kind is None else f"{kind} {step[kind]!r}"
