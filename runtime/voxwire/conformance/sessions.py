"""voxwire's answer to a session case: the steps played through the side's sans-I/O core.

The side under test's own messages are sent through its core's API (the core stamps them; the
verdict is ``sent``, or ``refused`` when the core would not send such a message now), the peer's
are received by the core, link events are told to it, the application's calls are made and time
is let pass (a ``wait`` fires what is due), and what the core returns becomes the step's verdict
(docs/conformance.md, "Sessions").

The same players judge a capture in ``voxwire validate`` (:mod:`voxwire.validate`), one player
per side, each fed every step: so a capture is judged by the cores' own rules and words. A
step is a capture line as a dict: ``{"t", "from", "text"}``, ``{"t", "from", "binary"}``
(bytes) or ``{"t", "link"}``; each player answers a :class:`Judged`.

The players are private modules beside this one: what they share (a step, its verdict, how a
step reaches a core) in ``voxwire.conformance._players``, the OVP gateway and client in
``voxwire.conformance._ovp_players``, the Brisvox agent and engine in
``voxwire.conformance._brisvox_players``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from voxwire.conformance._brisvox_players import REPLAY, AgentPlayer, EnginePlayer
from voxwire.conformance._ovp_players import ClientPlayer, GatewayPlayer
from voxwire.conformance._players import (
    BROKEN_CODE,
    LINK_STEPS,
    Judged,
    Player,
    Step,
    Verdict,
)

__all__ = ["BROKEN_CODE", "LINK_STEPS", "PLAYERS", "Judged", "Player", "Step", "Verdict", "play"]


def play(protocol: str, side: str, steps: Sequence[Step]) -> list[Verdict]:
    """The verdict of every step; raises ``ValueError`` for a side voxwire does not play or
    a case it cannot start (a Brisvox engine case's first message from the engine is its
    session.start).

    A case whose first step is a message begins on the side's first connection, open at that
    step's time; any other first step comes before it (a ``link: open`` step opens it). The
    first message from the server names the session (else the first message, else none)."""
    make = _CASE_PLAYERS.get((protocol, side))
    if make is None:
        raise ValueError(f"voxwire plays no {protocol} side {side!r} in session cases")
    if not steps:
        raise ValueError(f"a {protocol} {side} case has no steps")
    messages = [s for s in steps if "from" in s]
    named = next((s for s in messages if s["from"] == "server"), None)
    if named is None and messages:
        named = messages[0]
    player = make(named, steps[0]["t"] if "from" in steps[0] else None)
    return [player.step(step).verdict for step in steps]


PLAYERS: Final[dict[tuple[str, str], Callable[[Step], Player]]] = {
    ("ovp", "gateway"): lambda first: GatewayPlayer(first, first["t"]),
    ("ovp", "client"): lambda first: ClientPlayer(first, first["t"]),
    ("brisvox", "agent"): lambda first: AgentPlayer(first, first["t"]),
    ("brisvox", "engine"): lambda first: EnginePlayer(first, first["t"], REPLAY),
}
"""A player for each (protocol, side), made from the first step it can start from, on a
connection open at its time (it raises ``ValueError`` or ``ProtocolError`` for a step it cannot
start from), as ``voxwire validate`` drives it."""

_CASE_PLAYERS: Final[dict[tuple[str, str], Callable[[Step | None, float | None], Player]]] = {
    ("ovp", "gateway"): GatewayPlayer,
    ("ovp", "client"): ClientPlayer,
    ("brisvox", "agent"): AgentPlayer,
    ("brisvox", "engine"): EnginePlayer,  # the document's reconnect bounds
}
"""A player made from the message that names the session (``None``: none does) and the time
its first connection opened (``None``: the case opens it)."""
