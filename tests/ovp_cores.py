"""Helpers of the sans-I/O OVP core tests (tests/test_ovp_client_core.py, ..._gateway_core.py)."""

from __future__ import annotations

import json
import struct
from typing import Any

from tests.test_ovp_support import AGENT, CALL, MOMENT, PCM, SESSION, TS
from voxwire import ovp
from voxwire.ovp._session import AUDIO_FORMAT
from voxwire.ovp.client_core import ClientCore, ServerEvent
from voxwire.ovp.gateway_core import GatewayCore, LinkDropped, ToLink
from voxwire.sansio import SendText

EPOCH = 1_778_762_096.0  # 2026-05-14T12:34:56Z


def server_event(type_: str, seq: int, session_id: str = SESSION, **fields: Any) -> bytes:
    return json.dumps(
        {"type": type_, "seq": seq, "ts": TS, "session_id": session_id, **fields}
    ).encode()


def start_event(seq: int = 0, **audio: int) -> bytes:
    fmt = {"sample_rate_hz": 16000, "sample_width_bits": 16, "channels": 1, "frame_ms": 20}
    start = ovp.SessionStart(
        seq=seq,
        ts=MOMENT,
        session_id=SESSION,
        protocol_version="1.0",
        call=CALL,
        agent=AGENT,
        audio=AUDIO_FORMAT,
    )
    data = json.loads(ovp.encode(start))
    data["audio"] = {**fmt, **audio}
    return json.dumps(data).encode()


def thinking(seq: int) -> bytes:
    return server_event("agent.thinking", seq, turn_id="t1", delta=f"d{seq}")


def frame(direction: int, frame_seq: int, *, size: int = 652, flags: int = 0) -> bytes:
    data = struct.pack("<BBHII", 1, flags, direction, frame_seq, 0) + PCM
    return data[:size]


def texts(out: list[Any]) -> list[dict[str, Any]]:
    """Every text written (plain or addressed), as JSON."""
    found = []
    for item in out:
        action = item.action if isinstance(item, ToLink) else item
        if isinstance(action, SendText):
            found.append(json.loads(action.data))
    return found


def of(kind: type, out: list[Any]) -> list[Any]:
    return [item for item in out if isinstance(item, kind)]


def started_client() -> ClientCore:
    core = ClientCore(SESSION, epoch=EPOCH)
    assert core.connected(0.0) == []
    out = core.receive_text(start_event(), 0.1)
    assert of(ServerEvent, out)[0].message.type == "session.start"
    return core


def started_gateway(**kwargs: Any) -> tuple[GatewayCore, int]:
    core = GatewayCore(SESSION, epoch=EPOCH, **kwargs)
    link, out = core.open_link(0.0)
    assert out == []
    out = core.start(CALL, AGENT, 0.0)
    assert texts(out)[0]["type"] == "session.start"
    return core, link


def client_event(type_: str, seq: int, **fields: Any) -> bytes:
    return server_event(type_, seq, **fields)


def error_of(out: list[Any]) -> dict[str, Any]:
    errors = [t for t in texts(out) if t["type"] == "error"]
    assert len(errors) == 1, out
    return errors[0]


def drop_and_reopen(core: GatewayCore, link: int, at: float, reopen: float) -> int:
    assert of(LinkDropped, core.link_lost(link, at))
    new, out = core.open_link(reopen)
    assert out == []
    return new
