"""An OVP session as data that can move: :class:`SessionState`, sans-I/O.

What another gateway process needs to take a session over, beside the events the session sent
(kept in a :class:`~voxwire.cluster.ReplayStore`): the token's tenant, the agent's configuration
with its patches, the counters of both directions, the state of the turn-taking events, and the
times the resume window and the 5 s events run from. :func:`snapshot` takes it from a
:class:`~voxwire.ovp.gateway_core.GatewayCore`; :func:`restore` builds a core from it and the
events a resume needs, as the process that handed it over would have served that resume. Times
travel as wall-clock seconds (each process has its own monotonic clock).

```text
state = snapshot(core, claims, now=clock.now(), wall=time.time())
data = encode_state(state)                           # bytes for the store
taken = TakenOver(decode_state(data), events, after=last_server_seq, first=resume_text)
core = restore(taken, now=clock.now(), wall=time.time())
```
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from voxwire.ovp import (
    FRAME_MS,
    FRAME_SEQ_MODULUS,
    RTP_TIMESTAMP_MODULUS,
    SAMPLES_PER_FRAME,
    STREAM_WINDOW_EVENTS,
    AgentConfig,
    CostBreakdown,
)
from voxwire.ovp._session import SessionStateError
from voxwire.ovp.gateway_core import GatewayCore, GatewayState
from voxwire.ovp.gateway_periodic import Quality
from voxwire.ovp.gateway_tokens import TokenClaims

__all__ = [
    "SessionState",
    "TakenOver",
    "decode_state",
    "encode_state",
    "movable",
    "restore",
    "snapshot",
]

_FRAMES_PER_S: Final = 1000 / FRAME_MS
_MOVABLE: Final = (GatewayState.LIVE, GatewayState.DROPPED)


class SessionState(msgspec.Struct, frozen=True, kw_only=True):
    """One OVP session's resume state, as the gateway that held it last saved it."""

    session_id: str
    tenant_id: str
    """The tenant of the token it started with: a resume's token must be of the same."""
    saved_at: float
    """Wall-clock seconds when it was taken."""
    final: bool
    """Taken by a drain after the session stopped moving (exact); else a running snapshot,
    which may be behind the session by what it did since."""
    started_at: float
    dropped_at: float | None
    """Wall-clock seconds of the drop the resume window runs from (None: the link was up)."""
    last_seq: int
    last_client_seq: int | None
    agent: AgentConfig
    caller_context: dict[str, Any] | None
    frame_seq_out: int
    rtp_timestamp_out: int
    frame_seq_in: int | None
    client_frames: int
    server_frames: int
    frames_unsent: int
    counts: dict[str, int]
    takeover: bool | None
    handoff: str | None
    quality: tuple[float, float, float, float] | None
    cost: CostBreakdown | None
    next_quality: float | None
    """Wall-clock seconds when the next ``call.quality.update`` is due."""
    next_cost: float | None


@dataclass(frozen=True, slots=True)
class TakenOver:
    """A session taken over from the store: its state, the events its resume needs (those after
    seq ``after``), and the resume the connection began with."""

    state: SessionState
    events: list[bytes]
    after: int
    first: str


def movable(core: GatewayCore) -> bool:
    """Whether another process can take the session over: started, and not ending."""
    return core.state in _MOVABLE and core.agent is not None


def snapshot(
    core: GatewayCore, claims: TokenClaims, *, now: float, wall: float, final: bool = False
) -> SessionState:
    """The resume state of ``core`` at ``now`` (its clock), ``wall`` (the wall clock)."""
    if not movable(core):
        raise SessionStateError(f"a {core.state.value} session cannot move to another process")
    assert core.agent is not None and core.started_at is not None

    def at(moment: float | None) -> float | None:
        return None if moment is None else wall - (now - moment)

    events, reports = core._events, core._reports
    quality = reports.quality
    return SessionState(
        session_id=core.session_id,
        tenant_id=claims.tenant_id,
        saved_at=wall,
        final=final,
        started_at=wall - (now - core.started_at),
        dropped_at=at(core.dropped_at),
        last_seq=core.last_seq,
        last_client_seq=events.last_client_seq,
        agent=core.agent,
        caller_context=core.caller_context,
        frame_seq_out=core._frames_out.frame_seq,
        rtp_timestamp_out=core._frames_out.rtp_timestamp,
        frame_seq_in=core._frames_in.last,
        client_frames=core.client_frames,
        server_frames=core.server_frames,
        frames_unsent=core.frames_unsent,
        counts=dict(events._counts),
        takeover=events._takeover,
        handoff=events._handoff,
        quality=None
        if quality is None
        else (quality.packet_loss_pct, quality.jitter_ms, quality.rtt_ms, quality.mos),
        cost=reports.cost,
        next_quality=at(reports._next_quality),
        next_cost=at(reports._next_cost),
    )


def restore(
    taken: TakenOver,
    *,
    now: float,
    wall: float,
    accept_patch: Callable[[Any], str | None] | None = None,
    window: int = STREAM_WINDOW_EVENTS,
    measure: Callable[[float], Quality] | None = None,
) -> GatewayCore:
    """A core that holds the session ``taken`` over, dropped and waiting for its resume, with the
    events that resume needs for the replay (the last of them the session's last). A state that
    is not ``final`` may be behind the session: audio sent since it was taken is accounted for by
    moving ``frame_seq`` ahead by what real time allows."""
    state = taken.state
    core = GatewayCore(
        state.session_id,
        epoch=wall - now,
        accept_patch=accept_patch,
        window=window,
        measure=measure,
    )

    def at(moment: float | None) -> float | None:
        return None if moment is None else now - (wall - moment)

    core.state = GatewayState.DROPPED
    core.agent = state.agent
    core.caller_context = state.caller_context
    core.started_at = now - (wall - state.started_at)
    core.dropped_at = now if state.dropped_at is None else at(state.dropped_at)
    core._stamper.next_seq = taken.after + len(taken.events) + 1
    replay = core._stream.replay
    for seq, data in enumerate(taken.events, start=taken.after + 1):
        replay.add(seq, data, now)
    replay.evicted_through = taken.after
    frames_out, rtp_out = state.frame_seq_out, state.rtp_timestamp_out
    if not state.final:  # frames may have left since the snapshot: never repeat a frame_seq
        ahead = math.ceil(max(0.0, wall - state.saved_at) * _FRAMES_PER_S) + int(_FRAMES_PER_S)
        frames_out = (frames_out + ahead) % FRAME_SEQ_MODULUS
        rtp_out = (rtp_out + ahead * SAMPLES_PER_FRAME) % RTP_TIMESTAMP_MODULUS
    core._frames_out.frame_seq = frames_out
    core._frames_out.rtp_timestamp = rtp_out
    core._frames_in.last = state.frame_seq_in
    core.client_frames = state.client_frames
    core.server_frames = state.server_frames
    core.frames_unsent = state.frames_unsent
    events, reports = core._events, core._reports
    events.last_client_seq = state.last_client_seq
    events._counts.update(state.counts)
    events._takeover = state.takeover
    events._handoff = state.handoff
    reports.quality = None if state.quality is None else Quality(*state.quality)
    reports.cost = state.cost
    reports._next_quality = at(state.next_quality)
    reports._next_cost = at(state.next_cost)
    return core


_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder(SessionState)


def encode_state(state: SessionState) -> bytes:
    """``state`` as the bytes a store keeps."""
    return _ENCODER.encode(state)


def decode_state(data: bytes) -> SessionState:
    """The state ``data`` holds; ``msgspec.ValidationError`` for bytes that hold no state."""
    return _DECODER.decode(data)
