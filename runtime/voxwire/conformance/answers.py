"""voxwire as the implementation under test: its answer to each conformance request, as the
testee line protocol (docs/conformance.md) defines it.
"""

from __future__ import annotations

import importlib
import json
from types import ModuleType
from typing import Any

from voxwire._rules import json_equal
from voxwire.conformance.judge import shown
from voxwire.conformance.sessions import play
from voxwire.conformance.vectors import PROTOCOLS, Case, input_bytes
from voxwire.machine import traced

__all__ = ["answer", "request"]


def request(case: Case) -> dict[str, Any]:
    """What a testee is sent for ``case``: the case without its expectation and notes."""
    return {
        key: value
        for key, value in case.data.items()
        if key in ("id", "protocol", "kind", "sender", "frame", "input", "steps", "side")
    }


def answer(req: dict[str, Any]) -> dict[str, Any]:
    """voxwire's answer to one request (the testee line protocol's answer object).

    Never raises: anything voxwire should not do (another exception than its
    ``ProtocolError``) becomes an ``error`` answer.
    """
    case_id = req.get("id")
    try:
        protocol = req.get("protocol")
        if protocol not in PROTOCOLS:
            return {"id": case_id, "error": f"unknown protocol {protocol!r}"}
        kind = req.get("kind")
        if kind == "session":
            with traced() as taken:
                steps = play(protocol, str(req.get("side")), req["steps"])
            claims = dict.fromkeys(f"{t.role} {t.state}.{t.input}" for t in taken)
            return {"id": case_id, "steps": steps, "taken": list(claims)}
        module = importlib.import_module(f"voxwire.{protocol}")
        data = input_bytes(req.get("input") or {})
        if kind == "decode":
            return {
                "id": case_id,
                **_decode(module, data, req.get("sender"), "text" in req["input"]),
            }
        if kind == "frame":
            return {"id": case_id, **_frame(module, data, req.get("sender"))}
        return {"id": case_id, "error": f"kind {kind!r} is not supported by voxwire's runner yet"}
    except Exception as exc:  # the runner reports it; it never stops the run
        return {"id": case_id, "error": f"{type(exc).__name__}: {exc}"}


def _decode(module: ModuleType, data: bytes, sender: Any, is_text: bool) -> dict[str, Any]:
    got = _decode_one(module, data, sender)
    if is_text and "error" not in got:
        # voxwire also takes a str (text frames): the same message must give the same answer.
        again = _decode_one(module, data.decode("utf-8"), sender)
        if not json_equal(again, got):
            return {"error": f"bytes and str inputs disagree: {shown(got)} vs {shown(again)}"}
    return got


def _decode_one(module: ModuleType, data: bytes | str, sender: Any) -> dict[str, Any]:
    try:
        message = module.decode(data, sender=sender)
    except module.ProtocolError as exc:
        return {"valid": False, "code": str(exc.code)}
    except Exception as exc:
        return {"error": f"decode raised {type(exc).__name__} (not a ProtocolError): {exc}"}
    try:
        value = json.loads(module.encode(message))
    except module.ProtocolError as exc:  # read at the bound, written longer: size-counted-as-sent
        return {"valid": True, "type": message.type, "encode_code": str(exc.code)}
    except Exception as exc:
        return {"error": f"encode of the decoded message raised {type(exc).__name__}: {exc}"}
    got: dict[str, Any] = {"valid": True, "type": message.type, "value": value}
    if isinstance(message, module.UnknownMessage):
        got["unknown"] = True
    return got


def _frame(module: ModuleType, data: bytes, sender: Any) -> dict[str, Any]:
    expected = None
    if sender is not None:
        expected = next(
            (d for d in module.FrameDirection if d.name.lower().startswith(f"{sender}_to_")), None
        )
        if expected is None:
            return {"error": f"no frame direction for sender {sender!r}"}
    try:
        frame = module.decode_frame(data, expected_direction=expected)
    except module.ProtocolError as exc:
        return {"valid": False, "code": str(exc.code)}
    except Exception as exc:
        return {"error": f"decode_frame raised {type(exc).__name__} (not a ProtocolError): {exc}"}
    header: dict[str, Any] = {}
    payload = b""
    for name in frame.__struct_fields__:
        value = getattr(frame, name)
        if isinstance(value, bytes | bytearray | memoryview):
            payload = bytes(value)
        else:
            header[name] = int(value)
    if module.encode_frame(frame) != data:
        return {"error": "encode_frame(decode_frame(b)) != b"}
    return {"valid": True, "header": header, "payload_hex": payload.hex()}
