"""The binary frames as Python codecs: each layout as ``struct`` formats, its header's checks
(constants, reserved flag bits, the direction enum) as lines and as one condition, its flags as
properties.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from codegen import names
from codegen.ir import Protocol
from codegen.pytext import docstring

__all__ = ["PyFrame", "build_frames"]


@dataclass(frozen=True)
class PyFrame:
    """A binary frame layout, ready to print as a struct-based codec."""

    name: str
    doc: list[str]
    size_constant: str
    header_struct: str
    size: int
    struct_format: str
    header: list[tuple[str, str, list[str]]]
    """(attribute, annotation, docstring lines) of each header field."""
    defaults: dict[str, str]
    payload: str
    fields: list[tuple[str, str, list[str]]]
    """(attribute, annotation, docstring lines) of the frame's fields in the constructor's
    order: the header's and the payload's required ones, then those with defaults (each group
    in wire order)."""
    payload_offset: int
    payload_size: int
    payload_doc: list[str]
    flags: list[tuple[str, str, int, list[str]]]
    """(constant name, property name, mask, docstring lines) of each named bit."""
    decode_lines: list[str]
    """Checks of the unpacked header values (names bound), before the payload is touched."""
    header_test: str
    """The same checks as one condition, true when the header breaks any of them."""
    read_test: str
    """``header_test`` for values read from a frame, which are never negative: a mask of low
    bits and values 0 to n are tested by one comparison each."""
    layout_struct: str
    layout_format: str
    """The whole frame as one ``struct`` format: the header, then the payload as bytes."""
    refusal: str
    error: str


def _frame_raise(code: str, detail: str, field: str) -> str:
    return f'    raise {names.PROTOCOL_ERROR}({code}, {detail}, path="{field}")'


_STRUCT_CODES = {"u8": "B", "u16": "H", "u32": "I"}


def build_frames(protocol: Protocol) -> list[PyFrame]:
    """The frame layouts of ``protocol`` as printable codecs."""
    error_names = {e.code: e.py_name for e in protocol.errors}
    frames = []
    for frame in protocol.frames:
        order = "<" if frame.byte_order == "little" else ">"
        code = f"{names.ERROR_CODE}." + error_names[frame.error]
        lines: list[str] = []
        tests: list[str] = []
        read_tests: list[str] = []
        header = []
        defaults = {}
        flag_specs = []
        for f in frame.header:
            annotation = "int"
            if f.const is not None:
                defaults[f.name] = repr(f.const)
                tests.append(f"{f.name} != {f.const}")
                read_tests.append(tests[-1])
                lines.append(f"if {tests[-1]}:")
                lines.append(
                    _frame_raise(code, f'f"{f.name} is {{{f.name}}}, not {f.const}"', f.name)
                )
            if f.flags:
                mask = sum(1 << bit for bit, _, _ in f.flags)
                defaults[f.name] = "0"
                tests.append(f"{f.name} & ~{mask:#04x}")
                low_bits = mask & (mask + 1) == 0
                read_tests.append(f"{f.name} > {mask:#04x}" if low_bits else tests[-1])
                lines.append(f"if {tests[-1]}:")
                lines.append(
                    _frame_raise(code, f'f"reserved bits set in {{{f.name}:#04x}}"', f.name)
                )
                for bit, flag, description in f.flags:
                    flag_specs.append((names.flag(flag), flag, 1 << bit, docstring(description)))
            if f.enum is not None:
                allowed = names.enum_values(f.enum.name)
                tests.append(f"{f.name} not in {allowed}")
                values = sorted(int(v.value) for v in f.enum.values)
                from_zero = values == list(range(len(values)))
                read_tests.append(f"{f.name} > {values[-1]}" if from_zero else tests[-1])
                lines.append(f"if {tests[-1]}:")
                detail = f'f"{f.name} {{{f.name}}} is not one of {{sorted({allowed})}}"'
                lines.append(_frame_raise(code, detail, f.name))
            header.append((f.name, annotation, docstring(f.description)))
        header_format = "".join(_STRUCT_CODES[f.kind] for f in frame.header)
        if frame.payload.offset != struct.calcsize(order + header_format) or (
            frame.payload.offset + frame.payload.size != frame.size
        ):
            raise ValueError(
                f"frame {frame.name}: the payload must fill the frame after the header"
            )
        payload = (
            frame.payload.name,
            "bytes | bytearray | memoryview",
            docstring(frame.payload.description),
        )
        fields = [f for f in header if f[0] not in defaults] + [payload]
        fields += [f for f in header if f[0] in defaults]
        frames.append(
            PyFrame(
                name=frame.name,
                doc=docstring(frame.description),
                size_constant=names.frame_size(frame.name),
                header_struct=names.frame_header(frame.name),
                size=frame.size,
                struct_format=order + header_format,
                header=header,
                defaults=defaults,
                payload=frame.payload.name,
                fields=fields,
                payload_offset=frame.payload.offset,
                payload_size=frame.payload.size,
                payload_doc=docstring(frame.payload.description),
                flags=flag_specs,
                decode_lines=lines,
                header_test=" or ".join(tests) or "False",
                read_test=" or ".join(read_tests) or "False",
                layout_struct=names.frame_layout(frame.name),
                layout_format=f"{order}{header_format}{frame.payload.size}s",
                refusal=names.frame_refusal(frame.name),
                error=code,
            )
        )
    return frames
