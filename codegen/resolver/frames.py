"""The resolver's binary frames: the layout of each frame's fields, their flags, constants and
enums, the direction field the decoders check against the sender, and the examples.
"""

from __future__ import annotations

from typing import Any

from codegen.ir import Frame, FrameExample, FrameField
from codegen.loader import PathT
from codegen.resolver.ledger import Ledger

__all__ = ["FrameResolver"]

_FRAME_SIZES = {"u8": 1, "u16": 2, "u32": 4, "u64": 8}
_FRAME_UNSUPPORTED = {
    "u64": "a u64 header field is not supported: the TypeScript binding reads header fields as "
    "numbers, exact only to 2^53; split it into two u32 fields",
}
"""Frame field types the format names but a binding cannot carry exactly: refused, with why."""


class FrameResolver(Ledger):
    def _frame(self, f: dict[str, Any], path: PathT) -> Frame:
        fields = []
        offset = 0
        for i in range(len(f["fields"])):
            field = self._frame_field(f, i, offset, (*path, "fields", i))
            fields.append(field)
            offset += field.size
        if offset != f["size"]:
            self.fail((*path, "size"), f"the fields add up to {offset} bytes, not {f['size']}")
        direction = next((i for i, x in enumerate(fields[:-1]) if x.enum is not None), None)
        if fields and direction is None:
            self.fail(
                (*path, "fields"),
                "no header field has an enum: the decoders check one (the direction) against "
                "the sender",
            )
        elif direction is not None:
            self._check_direction(fields[direction], (*path, "fields", direction, "enum"))
        self._code(f["error"], (*path, "error"))
        header_names = [x.name for x in fields[:-1]]
        examples = []
        for i, e in enumerate(f["examples"]):
            where = (*path, "examples", i)
            if sorted(e["header"]) != sorted(header_names):
                self.fail(
                    (*where, "header"), f"an example header sets exactly {', '.join(header_names)}"
                )
            examples.append(
                FrameExample(e["description"].strip(), dict(e["header"]), bytes.fromhex(e["fill"]))
            )
        return Frame(
            name=f["name"],
            description=f["description"].strip(),
            byte_order=f["byte_order"],
            size=f["size"],
            error=f["error"],
            fields=tuple(fields),
            examples=tuple(examples),
            source=f.get("source"),
            decisions=self._decisions(f, path, f"frame {f['name']}"),
        )

    def _frame_field(self, f: dict[str, Any], i: int, offset: int, where: PathT) -> FrameField:
        """Field ``i`` of frame ``f``, at ``offset``: its width, flags, constant and enum checked
        against its type and its place (only the last, the payload, is bytes)."""
        x = f["fields"][i]
        kind = x["type"]
        size = _FRAME_SIZES.get(kind) or x.get("size", 0)
        if kind in _FRAME_UNSUPPORTED:
            self.fail((*where, "type"), _FRAME_UNSUPPORTED[kind])
        if kind == "bytes" and "size" not in x:
            self.fail(where, "a bytes field needs a size")
        if kind != "bytes" and "size" in x and x["size"] != size:
            self.fail((*where, "size"), f"{kind} is {size} bytes, not {x['size']}")
        if kind == "bytes" and i != len(f["fields"]) - 1:
            self.fail(where, "only the last field (the payload) may be bytes")
        if kind != "bytes" and i == len(f["fields"]) - 1:
            self.fail(where, "the last field must be the bytes payload")
        enum = None
        if "enum" in x:
            enum = self.enums.get(x["enum"])
            if enum is None:
                self.fail((*where, "enum"), f"unknown enum {x['enum']!r}")
            elif not enum.is_int:
                self.fail((*where, "enum"), f"enum {x['enum']} has no integer values")
        bits = [(b["bit"], b["name"], b["description"].strip()) for b in x.get("flags", [])]
        for j, (bit, _, _) in enumerate(bits):
            if kind in _FRAME_SIZES and bit >= 8 * size:
                self.fail((*where, "flags", j, "bit"), f"bit {bit} does not fit a {kind}")
        if "const" in x and kind in _FRAME_SIZES and not 0 <= x["const"] < 2 ** (8 * size):
            self.fail((*where, "const"), f"{x['const']} does not fit a {kind}")
        return FrameField(
            name=x["name"],
            kind=kind,
            size=size,
            offset=offset,
            const=x.get("const"),
            enum=enum,
            flags=tuple(bits),
            description=x["description"].strip(),
            decisions=self._decisions(x, where, f"frame {f['name']}, field {x['name']}"),
        )

    def _check_direction(self, direction: FrameField, path: PathT) -> None:
        """The direction enum names the sender of each value (``client_to_server``), which is
        how the frame vectors know what each sender's frames carry."""
        senders = [s["id"] for s in self.raw.data["senders"]]
        assert direction.enum is not None
        spelled = next(e for e in self.raw.data["enums"] if e["name"] == direction.enum.name)
        if any("name" not in v for v in spelled["values"]):
            return  # a value without its name is the problem, reported with the enum
        named = {
            s
            for v in direction.enum.values
            for s in senders
            if v.py_name.lower().startswith(f"{s}_to_")
        }
        if named != set(senders):
            wanted = ", ".join(f"{s}_to_..." for s in senders)
            self.fail(
                path,
                f"the values of {direction.enum.name} name the sender of each direction "
                f"({wanted}): none names {', '.join(sorted(set(senders) - named))}",
            )
