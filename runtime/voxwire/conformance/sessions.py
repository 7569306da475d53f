"""voxwire's answer to a session case: the steps played through the side's sans-I/O core.

The side under test's own messages are sent through its core's API (the core stamps them; the
verdict is ``sent``), the peer's are received by the core, link events are told to it, and what
the core returns becomes the step's verdict (docs/conformance.md, "Sessions").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final

import msgspec
from msgspec import UNSET

from voxwire import brisvox, ovp
from voxwire.brisvox.agent_core import (
    AgentCore,
    AgentOutput,
    EventReceived,
    StartReceived,
    ToolCallStarted,
)
from voxwire.brisvox.engine_core import AgentAccepted, CommandReceived, EngineCore, EngineOutput
from voxwire.brisvox.outputs import BadMessage, HandshakeFailed
from voxwire.ovp._session import Sent, SessionOver
from voxwire.ovp.client_core import ClientCore, ClientOutput, Rejected, ServerEvent
from voxwire.ovp.gateway_core import (
    STREAM_WINDOW,
    ClientEvent,
    GatewayCore,
    GatewayOutput,
    Resumed,
    ToLink,
)
from voxwire.sansio import Close, SendText

__all__ = ["SIDES", "play"]

Verdict = dict[str, Any]
_ENVELOPE: Final = ("type", "seq", "ts", "session_id")


class _SeqPeek(msgspec.Struct):
    seq: int


_PEEK: Final = msgspec.json.Decoder(_SeqPeek)


def play(protocol: str, side: str, steps: Sequence[dict[str, Any]]) -> list[Verdict]:
    """The verdict of every step; raises ``ValueError`` for a side voxwire does not play."""
    player = SIDES.get((protocol, side))
    if player is None:
        raise ValueError(f"voxwire plays no {protocol} side {side!r} in session cases")
    return player(steps)


def _session_of(first: dict[str, Any]) -> tuple[str, float]:
    """The session id of a case's first server message, and the epoch its ``ts`` implies."""
    message: Any = ovp.decode(first["text"], "server")
    if isinstance(message, ovp.UnknownMessage):
        raise ValueError(f"the first server message is of an unknown type {message.type!r}")
    ts = datetime.fromisoformat(str(message.ts).replace("Z", "+00:00")).timestamp()
    return str(message.session_id), ts - float(first["t"])


def _fields(message: Any) -> dict[str, Any]:
    """A decoded message's own fields, unset ones left out (the envelope is the core's)."""
    return {
        name: value
        for name in message.__struct_fields__
        if name not in _ENVELOPE and (value := getattr(message, name)) is not UNSET
    }


class _Gateway:
    """An OVP ``GatewayCore`` playing the server's steps and judging the client's."""

    def __init__(self, first: dict[str, Any]) -> None:
        session_id, epoch = _session_of(first)
        self.core = GatewayCore(session_id, epoch=epoch)
        self.link, out = self.core.open_link(first["t"])
        self._written(out, first["t"])

    def step(self, step: dict[str, Any]) -> Verdict:
        t = step["t"]
        if "link" in step:
            return self._link(step["link"], t)
        if step["from"] == "server":
            return self._send(step["text"], t)
        out = self.core.receive_text(self.link, step["text"], t)
        self._written(out, t)
        return _judge(out, self.link)

    def _link(self, event: str, t: float) -> Verdict:
        if event == "open":
            self.link, out = self.core.open_link(t)
            self._written(out, t)
            return {"verdict": "done"} if not out else _judge(out, self.link)
        self._written(self.core.link_lost(self.link, t, answered_close=event == "closed"), t)
        return {"verdict": "done"}

    def _send(self, text: str, t: float) -> Verdict:
        message: Any = ovp.decode(text, "server")
        core = self.core
        if isinstance(message, ovp.SessionStart):
            out = core.start(message.call, message.agent, t)
        elif isinstance(message, ovp.SessionEnd):
            out = core.end(message.reason, t)
        else:
            out = core.send(type(message), _fields(message), t)
        self._written(out, t)
        sent: Any = next(o.message for o in out if isinstance(o, Sent))
        if sent.seq != message.seq:
            return {"verdict": "sent", "seq": sent.seq}
        return {"verdict": "sent"}

    def _written(self, out: list[GatewayOutput], t: float) -> None:
        """Every text handed to the current link is written at once (no back-pressure here)."""
        count = sum(
            1
            for o in out
            if isinstance(o, ToLink) and o.link == self.link and isinstance(o.action, SendText)
        )
        if count:  # its queue drained at once: the whole window is free again
            self._written(self.core.drained(self.link, STREAM_WINDOW, t), t)


def _judge(out: list[GatewayOutput], link: int) -> Verdict:
    sent = [o.message for o in out if isinstance(o, Sent)]
    closes = [o.action.code for o in out if isinstance(o, ToLink) and isinstance(o.action, Close)]
    errors = [m for m in sent if isinstance(m, ovp.ErrorEvent)]
    if errors:
        verdict: Verdict = {"verdict": "error", "code": str(errors[0].code)}
        if closes:
            verdict["close"] = int(closes[0])
        return verdict
    if any(isinstance(o, Resumed) for o in out):
        texts = [
            o.action.data
            for o in out
            if isinstance(o, ToLink) and o.link == link and isinstance(o.action, SendText)
        ]
        return {"verdict": "replay", "seqs": [_PEEK.decode(data).seq for data in texts]}
    if closes:
        return {"verdict": "close", "close": int(closes[0])}
    if any(isinstance(o, ClientEvent) for o in out):
        return {"verdict": "accepted"}
    return {"verdict": "ignored"}  # dropped without an answer


def _ovp_gateway(steps: Sequence[dict[str, Any]]) -> list[Verdict]:
    if not steps or steps[0].get("from") != "server":
        raise ValueError("an OVP gateway case starts with the gateway's session.start")
    gateway = _Gateway(steps[0])
    return [gateway.step(step) for step in steps]


class _Client:
    """An OVP ``ClientCore`` playing the client's steps and judging the gateway's."""

    def __init__(self, first: dict[str, Any]) -> None:
        session_id, epoch = _session_of(first)
        self.core = ClientCore(session_id, epoch=epoch)
        self.core.connected(first["t"])
        self.pending: list[Any] = []
        """Messages the core sent on its own (session.resume on a reconnect), not yet stepped."""

    def step(self, step: dict[str, Any]) -> Verdict:
        t = step["t"]
        if "link" in step:
            if step["link"] == "open":
                self.pending += [o.message for o in self.core.connected(t) if isinstance(o, Sent)]
            else:
                self.core.link_lost(t)
            return {"verdict": "done"}
        if step["from"] == "client":
            return self._send(step["text"], t)
        return _judge_client(self.core.receive_text(step["text"], t))

    def _send(self, text: str, t: float) -> Verdict:
        message: Any = ovp.decode(text, "client")
        sent: Any
        if self.pending and self.pending[0].type == message.type:
            sent = self.pending.pop(0)
            if _fields(sent) != _fields(message):
                return {"verdict": "sent", "fields": msgspec.to_builtins(_fields(sent))}
        else:
            out = self.core.send(type(message), _fields(message), t)
            sent = next(o.message for o in out if isinstance(o, Sent))
        if sent.seq != message.seq:
            return {"verdict": "sent", "seq": sent.seq}
        return {"verdict": "sent"}


def _judge_client(out: list[ClientOutput]) -> Verdict:
    closes = [int(o.code) for o in out if isinstance(o, Close)]
    refused = [str(o.error.code) for o in out if isinstance(o, Rejected)]
    refused += [str(o.code) for o in out if isinstance(o, SessionOver) and o.code and closes]
    if refused:
        verdict: Verdict = {"verdict": "error", "code": refused[0]}
        if closes:
            verdict["close"] = closes[0]
        return verdict
    if any(isinstance(o, ServerEvent) for o in out):
        return {"verdict": "accepted"}
    return {"verdict": "ignored"}


def _ovp_client(steps: Sequence[dict[str, Any]]) -> list[Verdict]:
    first = next((s for s in steps if s.get("from") == "server"), None)
    if first is None:
        raise ValueError("an OVP client case has a message from the gateway")
    client = _Client(first)
    return [client.step(step) for step in steps]


class _Agent:
    """A Brisvox ``AgentCore`` playing the agent's steps and judging the server's."""

    def __init__(self, first: dict[str, Any]) -> None:
        self.core = AgentCore(first["t"])

    def step(self, step: dict[str, Any]) -> Verdict:
        t = step["t"]
        if "link" in step:
            raise ValueError("a Brisvox agent case has no link events: a link is one call")
        if step["from"] == "agent":
            message: Any = brisvox.decode(step["text"], "agent")
            if isinstance(message, brisvox.SessionAccept):
                self.core.accept(message, t)
            elif isinstance(message, brisvox.ToolResult):
                self.core.send_tool_result(message, t)
            else:
                raise ValueError(f"voxwire's agent testee does not send {message.type}")
            return {"verdict": "sent"}
        return _judge_agent(self.core.receive_text(step["text"], t))


def _judge_agent(out: list[AgentOutput]) -> Verdict:
    closes = [int(o.code) for o in out if isinstance(o, Close)]
    refused = [str(o.error.code) for o in out if isinstance(o, BadMessage)]
    declined = [str(o.rejected.code) for o in out if isinstance(o, HandshakeFailed) and o.rejected]
    if declined:  # a valid session.start the agent will not take: session.reject
        return {"verdict": "rejected", "code": declined[0], "close": closes[0]}
    if refused:
        verdict: Verdict = {"verdict": "error", "code": refused[0]}
        if closes:
            verdict["close"] = closes[0]
        return verdict
    if closes:
        return {"verdict": "close", "close": closes[0]}
    if any(isinstance(o, (StartReceived, EventReceived, ToolCallStarted)) for o in out):
        return {"verdict": "accepted"}
    return {"verdict": "ignored"}


class _Engine:
    """A Brisvox ``EngineCore`` playing the server's steps and judging the agent's.

    What the core writes by itself (session.start on a connection, events.lost after a
    resumption) waits in ``pending`` until the case's step for it."""

    def __init__(self, first: dict[str, Any]) -> None:
        start: Any = brisvox.decode(first["text"], "server")
        if not isinstance(start, brisvox.SessionStart):
            raise ValueError("a Brisvox engine case starts with the engine's session.start")
        self.core = EngineCore(
            session_id=start.session_id,
            agent=start.agent,
            now=first["t"],
            capabilities=start.capabilities,
            call=None if start.call is UNSET else start.call,
            versions=tuple(start.versions),
        )
        self.pending: list[Any] = []
        self._wrote(self.core.connected(first["t"]), first["t"])

    def _wrote(self, out: list[EngineOutput], t: float) -> list[EngineOutput]:
        for o in out:
            if isinstance(o, SendText):
                stamped = self.core.stamp(o, t)
                self.pending.append(brisvox.decode(stamped.data, "server"))
        return out

    def step(self, step: dict[str, Any]) -> Verdict:
        t = step["t"]
        if "link" in step:
            if step["link"] == "open":
                self._wrote(self.core.connected(t), t)
            else:
                self._wrote(self.core.link_lost(t, f"link {step['link']}"), t)
            return {"verdict": "done"}
        if step["from"] == "agent":
            return _judge_engine(self._wrote(self.core.receive_text(step["text"], t), t))
        message: Any = brisvox.decode(step["text"], "server")
        if not any(p.type == message.type for p in self.pending):
            self._wrote(self.core.send_event(message, t), t)
        sent = next((p for p in self.pending if p.type == message.type), None)
        if sent is None:
            return {"verdict": "refused"}
        self.pending.remove(sent)
        return (
            {"verdict": "sent"} if sent.seq == message.seq else {"verdict": "sent", "seq": sent.seq}
        )


def _judge_engine(out: list[EngineOutput]) -> Verdict:
    closes = [int(o.code) for o in out if isinstance(o, Close)]
    refused = [str(o.error.code) for o in out if isinstance(o, BadMessage)]
    if refused:
        return {"verdict": "error", "code": refused[0]}
    if closes:
        return {"verdict": "close", "close": closes[0]}
    if any(isinstance(o, (AgentAccepted, CommandReceived)) for o in out):
        return {"verdict": "accepted"}
    return {"verdict": "ignored"}


def _brisvox_engine(steps: Sequence[dict[str, Any]]) -> list[Verdict]:
    if not steps:
        raise ValueError("a case has steps")
    engine = _Engine(steps[0])
    return [engine.step(step) for step in steps]


def _brisvox_agent(steps: Sequence[dict[str, Any]]) -> list[Verdict]:
    if not steps:
        raise ValueError("a case has steps")
    agent = _Agent(steps[0])
    return [agent.step(step) for step in steps]


SIDES: Final[dict[tuple[str, str], Callable[[Sequence[dict[str, Any]]], list[Verdict]]]] = {
    ("ovp", "gateway"): _ovp_gateway,
    ("ovp", "client"): _ovp_client,
    ("brisvox", "agent"): _brisvox_agent,
    ("brisvox", "engine"): _brisvox_engine,
}
"""The (protocol, side) pairs voxwire plays, and how."""
