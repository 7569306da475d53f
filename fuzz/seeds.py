"""The inputs mutation starts from: every example of the specs and every conformance vector."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ["ROOT", "Seeds", "load_seeds"]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Seeds:
    """What one protocol gives the fuzzer to start from."""

    messages: dict[str, list[bytes]]
    """Text messages per sender: the spec's examples, then every decode vector's input."""
    frames: list[bytes]
    """Binary frames: the frame vectors' inputs."""
    types: dict[str, list[str]]
    """The wire types each sender may send."""


def load_seeds(protocol: str) -> Seeds:
    """Read ``spec/<protocol>.yaml`` and ``generated/voxwire/<protocol>/vectors.jsonl``."""
    spec = yaml.safe_load((ROOT / "spec" / f"{protocol}.yaml").read_text(encoding="utf-8"))
    messages: dict[str, list[bytes]] = {s["id"]: [] for s in spec["senders"]}
    types: dict[str, list[str]] = {s["id"]: [] for s in spec["senders"]}
    for message in spec["messages"]:
        for sender in message["senders"]:
            types[sender].append(message["type"])
            messages[sender] += [
                json.dumps(e["json"], ensure_ascii=False).encode() for e in message["examples"]
            ]
    frames: list[bytes] = []
    vectors = ROOT / "generated" / "voxwire" / protocol / "vectors.jsonl"
    for line in vectors.read_text(encoding="utf-8").splitlines()[1:]:
        case = json.loads(line)
        if case["kind"] == "decode":
            given = case["input"]
            text = given["text"].encode() if "text" in given else base64.b64decode(given["base64"])
            messages[case["sender"]].append(text)
        elif case["kind"] == "frame" and "hex" in case["input"]:
            frames.append(bytes.fromhex(case["input"]["hex"]))
    return Seeds(messages=messages, frames=frames, types=types)
