"""Every TypeScript name the generated code uses is decided here (the Python ones: codegen.names).

Types, enums, unions and constants keep the Python binding's names (``SessionStart``,
``ServerMessage``, ``MAX_LINE_BYTES``), so one vocabulary spans both bindings; properties keep
the wire names; functions are camelCase, as TypeScript writes them.
"""

from __future__ import annotations

import json
import re

from codegen import names

__all__ = [
    "PACKAGE",
    "close_code_enum",
    "enum_values",
    "field_set",
    "flag",
    "frame_decoder",
    "frame_encoder",
    "frame_size",
    "function",
    "interface",
    "module",
    "property_key",
    "sender_union",
    "spec_table",
]

PACKAGE = "voxwire"
"""The npm package's name."""

_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def interface(class_name: str) -> str:
    """A message's or nested type's interface: the Python class name (``SessionStart``)."""
    return class_name


def field_set(class_name: str) -> str:
    """The interface of a field set (an envelope), the base its messages extend."""
    return class_name


def sender_union(sender_id: str) -> str:
    """``server`` -> ``ServerMessage``, as in Python."""
    return names.sender_union(sender_id)


def enum_values(enum_name: str) -> str:
    """``CallDirection`` -> ``CALL_DIRECTION_VALUES``: a closed enum's values as an array."""
    return names.enum_values(enum_name).lstrip("_")


def function(snake: str) -> str:
    """``decode_frame`` -> ``decodeFrame``."""
    head, *rest = snake.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def frame_decoder(frame_name: str, only: bool) -> str:
    """``decodeFrame`` for a protocol's one frame layout, else ``decodeAudioFrame``."""
    return "decodeFrame" if only else f"decode{frame_name}"


def frame_encoder(frame_name: str, only: bool) -> str:
    return "encodeFrame" if only else f"encode{frame_name}"


def frame_size(frame_name: str) -> str:
    """``AudioFrame`` -> ``AUDIO_FRAME_SIZE``, as in Python."""
    return names.frame_size(frame_name)


def flag(flag_name: str) -> str:
    """``silence`` -> ``FLAG_SILENCE``, as in Python."""
    return names.flag(flag_name)


def close_code_enum() -> str:
    """The const object of a protocol's close codes: ``CloseCode``, as in Python."""
    return names.CLOSE_CODE


def property_key(wire_name: str) -> str:
    """A property as TypeScript writes it: the wire name, quoted when it is no identifier."""
    return wire_name if _IDENTIFIER.match(wire_name) else json.dumps(wire_name)


def spec_table(protocol_id: str) -> str:
    """The protocol's rules as data, handed to the codec: ``OVP_SPEC``."""
    return f"{protocol_id.upper()}_SPEC"


def module(protocol_id: str, name: str) -> str:
    """Where a generated module lives, relative to ``generated/typescript/``."""
    return f"src/{protocol_id}/{name}.ts"
