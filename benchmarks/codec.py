"""Decode, encode and frame benchmarks of both protocols against their peers."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from benchmarks import corpus, peers
from benchmarks.timing import Contender, Result, measure
from voxwire import brisvox, ovp

__all__ = ["TARGETS", "Group", "run_codec_benchmarks"]


@dataclass(frozen=True)
class Group:
    """One comparison: the contenders, voxwire first, and their results."""

    title: str
    results: list[Result]

    def ratio(self, name: str, to: str | None = None) -> float:
        """How many times ``name`` takes the time of ``to`` (voxwire's, by default)."""
        by_name = {r.name: r for r in self.results}
        base = by_name[to] if to else self.results[0]
        return by_name[name].ns_per_item / base.ns_per_item


@dataclass(frozen=True)
class Target:
    group: str
    description: str
    check: Callable[[Group], tuple[bool, float]]


def _faster(contender: str, factor: float) -> Callable[[Group], tuple[bool, float]]:
    def check(group: Group) -> tuple[bool, float]:
        ratio = group.ratio(contender)
        return ratio >= factor, ratio

    return check


def _at_most(factor: float, of: str) -> Callable[[Group], tuple[bool, float]]:
    def check(group: Group) -> tuple[bool, float]:
        ratio = 1 / group.ratio(of)
        return ratio <= factor, ratio

    return check


SDK = "brisvox-agent parse_server_message"
PYDANTIC = "pydantic v2 discriminated union"
BARE = "bare msgspec union"
UNCHECKED = "bare msgspec union, Structs without their checks"
TARGETS = [
    Target(
        "Brisvox decode, server to agent",
        "at least 12x faster than the SDK's parser",
        _faster(SDK, 12),
    ),
    Target(
        "Brisvox decode, server to agent",
        "at least 4x faster than pydantic v2",
        _faster(PYDANTIC, 4),
    ),
    Target(
        "Brisvox decode, server to agent",
        "at most 1.2x the bare msgspec union, checks not counted",
        _at_most(1.2, UNCHECKED),
    ),
    Target(
        "OVP decode, server to client", "at least 4x faster than pydantic v2", _faster(PYDANTIC, 4)
    ),
    Target(
        "OVP decode, server to client",
        "at most 1.2x the bare msgspec union, checks not counted",
        _at_most(1.2, UNCHECKED),
    ),
    Target(
        "Brisvox decode from bytes, server to agent",
        "at most 1.2x the bare msgspec union, checks not counted",
        _at_most(1.2, UNCHECKED),
    ),
    Target(
        "OVP decode from bytes, server to client",
        "at most 1.2x the bare msgspec union, checks not counted",
        _at_most(1.2, UNCHECKED),
    ),
    Target(
        "Brisvox encode, agent to server",
        "at least 8x faster than json.dumps",
        _faster("json.dumps of the dicts", 8),
    ),
    Target(
        "OVP encode, server to client",
        "at least 8x faster than json.dumps",
        _faster("json.dumps of the dicts", 8),
    ),
    Target(
        "OVP frames",
        "decode_frame at most 3x a bare struct.unpack_from",
        _at_most(3, "struct.unpack_from of the header"),
    ),
]


def _bytes_group(title: str, protocol: Any, sender: str, texts: list[str], rounds: int) -> Group:
    """Decoding the same messages as bytes, as captures, queues, Redis streams and ``websockets``
    with ``decode=False`` hand them over (the README's first example decodes bytes)."""
    union = getattr(protocol, f"{sender.capitalize()}Message")
    contenders = _msgspec_contenders(protocol, sender, union)
    # The SDK's parser takes text only: it refuses bytes as a binary frame.
    return Group(title, measure(contenders, [text.encode() for text in texts], rounds))


def _msgspec_contenders(protocol: Any, sender: str, union: Any) -> list[Contender]:
    """voxwire's decoder and the two bare msgspec unions it is held to, from text or bytes."""
    return [
        Contender("voxwire decode", protocol.decoder(sender)),
        Contender(BARE, peers.bare_union(union)),
        Contender(UNCHECKED, peers.unchecked_union(union)),
    ]


def _decode_group(title: str, protocol: Any, sender: str, texts: list[str], rounds: int) -> Group:
    union_name = f"{sender.capitalize()}Message"
    union = getattr(protocol, union_name)
    names = [member.__name__ for member in union.__args__]
    protocol_id = protocol.__name__.rsplit(".", 1)[1]
    contenders = [
        *_msgspec_contenders(protocol, sender, union),
        Contender(
            "voxwire decode(data, sender=...)", lambda data: protocol.decode(data, sender=sender)
        ),
    ]
    if protocol is brisvox and sender == "server":
        contenders.append(Contender(SDK, peers.sdk_protocol().parse_server_message))
    contenders += [
        Contender(PYDANTIC, peers.pydantic_decoder(protocol_id, names)),
        Contender("json.loads + jsonschema", peers.jsonschema_decoder(protocol_id, union_name)),
        Contender("orjson.loads (no validation)", peers.orjson_loads()),
    ]
    return Group(title, measure(contenders, texts, rounds))


def _encode_group(title: str, protocol: Any, sender: str, texts: list[str], rounds: int) -> Group:
    messages = [protocol.decode(text, sender=sender) for text in texts]
    dicts = [json.loads(text) for text in texts]
    indices = list(range(len(texts)))
    bare = msgspec.json.Encoder().encode
    contenders = [
        Contender("voxwire encode", lambda i: protocol.encode(messages[i])),
        Contender("json.dumps of the dicts", lambda i: json.dumps(dicts[i], separators=(",", ":"))),
        Contender("bare msgspec encode (no checks)", lambda i: bare(messages[i])),
    ]
    if protocol is brisvox and sender == "agent":
        contenders.append(
            Contender("brisvox-agent encode", lambda i: peers.sdk_protocol().encode(dicts[i]))
        )
    return Group(title, measure(contenders, indices, rounds))


def _frame_groups(rounds: int) -> list[Group]:
    frames = [
        ovp.encode_frame(
            ovp.AudioFrame(
                direction=i % 2, frame_seq=i, rtp_timestamp=i * 320, pcm=bytes([i % 256]) * 640
            )
        )
        for i in range(2000)
    ]
    header = struct.Struct("<BBHII")
    decoded = [ovp.decode_frame(buf) for buf in frames]
    decode = [
        Contender("voxwire decode_frame", ovp.decode_frame),
        Contender("struct.unpack_from of the header", header.unpack_from),
        Contender("unpack_from + 652-byte copy", lambda buf: (header.unpack_from(buf), bytes(buf))),
    ]
    encode = [
        Contender("voxwire encode_frame", ovp.encode_frame),
        Contender(
            "struct.pack of the header + payload",
            lambda f: (
                header.pack(f.version, f.flags, f.direction, f.frame_seq, f.rtp_timestamp) + f.pcm
            ),
        ),
    ]
    return [
        Group("OVP frames", measure(decode, frames, rounds)),
        Group("OVP encode_frame", measure(encode, decoded, rounds)),
    ]


def run_codec_benchmarks(rounds: int, size: int) -> list[Group]:
    """Every codec comparison, in the order the report prints them."""
    return [
        _decode_group(
            "Brisvox decode, server to agent",
            brisvox,
            "server",
            corpus.brisvox_server_corpus(size),
            rounds,
        ),
        _decode_group(
            "Brisvox decode, agent to server",
            brisvox,
            "agent",
            corpus.brisvox_agent_corpus(size),
            rounds,
        ),
        _decode_group(
            "OVP decode, server to client", ovp, "server", corpus.ovp_server_corpus(size), rounds
        ),
        _decode_group(
            "OVP decode, client to server", ovp, "client", corpus.ovp_client_corpus(size), rounds
        ),
        _bytes_group(
            "Brisvox decode from bytes, server to agent",
            brisvox,
            "server",
            corpus.brisvox_server_corpus(size),
            rounds,
        ),
        _bytes_group(
            "OVP decode from bytes, server to client",
            ovp,
            "server",
            corpus.ovp_server_corpus(size),
            rounds,
        ),
        _encode_group(
            "Brisvox encode, agent to server",
            brisvox,
            "agent",
            corpus.brisvox_agent_corpus(size),
            rounds,
        ),
        _encode_group(
            "OVP encode, server to client", ovp, "server", corpus.ovp_server_corpus(size), rounds
        ),
        *_frame_groups(rounds),
    ]
