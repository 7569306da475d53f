"""The cases of each binary frame: its examples (sent by each sender, whose direction field must
name it), sizes around the frame's, and each header field's constant, flag bits and enum values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from codegen.cases.base import CaseBuilder
from codegen.ir import Frame, FrameField, Protocol

__all__ = ["FrameCases"]


class FrameCases(CaseBuilder):
    def frames(self, fr: Frame) -> None:
        cases = _FrameCases(self, fr)
        examples = [ex.to_bytes(fr) for ex in fr.examples]
        for i, buf in enumerate(examples):
            cases.add(f"example/{i + 1}", buf, f"examples[{i}]")
            for sender in cases.directions:
                cases.add(
                    f"example/{i + 1}/from-{sender}",
                    buf,
                    f"examples[{i}] sent by the {sender} "
                    "(its direction field must name the sender)",
                    sender,
                    {"owner": fr.name, "check": "direction_matches_sender"},
                )
        base = examples[0]
        size_covers = {"owner": fr.name, "check": "size", "bound": fr.size}
        for size in (0, fr.payload.offset, fr.size - 1, fr.size, fr.size + 1):
            buf = (base + b"\x00")[:size]
            cases.add(f"size/{size}", buf, f"size={fr.size}", covers=size_covers)
        for f in fr.header:

            def put(value: int, f: Any = f) -> bytes:
                return (
                    base[: f.offset]
                    + value.to_bytes(f.size, fr.byte_order)
                    + base[f.offset + f.size :]
                )

            cases.header_field(f, put)
        cases.add(
            "payload/all-ones",
            base[: fr.payload.offset] + b"\xff" * fr.payload.size,
            "payload: any bytes",
        )


class _FrameCases:
    """The cases of one frame: each judged on the frame's rules and added to ``gen``."""

    def __init__(self, gen: CaseBuilder, fr: Frame) -> None:
        self.gen = gen
        self.fr = fr
        self.prefix = f"{gen.p.id}/frame/{fr.name}/"
        self.src = f"{gen.spec} frames {fr.name}"
        self.code = fr.error
        self.directions = _directions(gen.p, fr)

    def header(self, buf: bytes) -> dict[str, int]:
        fr = self.fr
        return {
            f.name: int.from_bytes(buf[f.offset : f.offset + f.size], fr.byte_order)
            for f in fr.header
        }

    def faults(self, buf: bytes, sender: str | None) -> list[str]:
        fr = self.fr
        if len(buf) != fr.size:
            return ["size"]
        out = []
        values = self.header(buf)
        for f in fr.header:
            value = values[f.name]
            if f.const is not None and value != f.const:
                out.append(f.name)
            if f.flags and value & ~sum(1 << bit for bit, _, _ in f.flags):
                out.append(f.name)
            if f.enum is not None and value not in [v.value for v in f.enum.values]:
                out.append(f.name)
            if f.enum is not None and sender is not None and value != self.directions.get(sender):
                out.append("sender")
        return out

    def add(
        self,
        case_id: str,
        buf: bytes,
        why: str,
        sender: str | None = None,
        covers: dict[str, Any] | None = None,
    ) -> None:
        fr = self.fr
        found = self.faults(buf, sender)
        expect: dict[str, Any]
        if found:
            expect = self.gen.invalid(self.code)
            why += f"; frames {fr.name}.error"
        else:
            expect = {
                "valid": True,
                "header": self.header(buf),
                "payload_hex": buf[fr.payload.offset :].hex(),
            }
        self.gen.add(
            self.prefix + case_id,
            "frame",
            sender,
            buf,
            expect,
            f"{self.src} {why}",
            covers,
            frame=fr.name,
        )

    def header_field(self, f: FrameField, put: Callable[[int], bytes]) -> None:
        """The values of header field ``f`` around its constant, flag bits or enum; ``put``
        writes a value into the first example."""
        top = (1 << (8 * f.size)) - 1
        if f.const is not None:
            self.const(f, f.const, put, top)
        if f.flags:
            self.flags(f, put)
        if f.enum is not None:
            self.enum(f, put, top)
        if f.const is None and not f.flags and f.enum is None:
            self.add(f"{f.name}/any/max", put(top), f"{f.name} ({f.kind}, any value)")

    def const(self, f: FrameField, const: int, put: Callable[[int], bytes], top: int) -> None:
        covers = {"owner": self.fr.name, "field": f.name, "check": "const", "bound": const}
        self.add(
            f"{f.name}/const/at-limit",
            put(const),
            f"{f.name} const={const}",
            covers=covers,
        )
        for other in sorted({const - 1, const + 1, top} - {const}):
            if 0 <= other <= top:
                self.add(
                    f"{f.name}/const/{other}",
                    put(other),
                    f"{f.name} const={const}",
                    covers=covers,
                )

    def flags(self, f: FrameField, put: Callable[[int], bytes]) -> None:
        mask = sum(1 << bit for bit, _, _ in f.flags)
        covers = {"owner": self.fr.name, "field": f.name, "check": "flags", "bound": mask}
        for bit, flag, _ in f.flags:
            self.add(
                f"{f.name}/flag/{flag}",
                put(1 << bit),
                f"{f.name} flags bit {bit} ({flag})",
                covers=covers,
            )
        self.add(
            f"{f.name}/flag/all-named",
            put(mask),
            f"{f.name} flags (every named bit)",
            covers=covers,
        )
        for bit in range(8 * f.size):
            if not mask & (1 << bit):
                self.add(
                    f"{f.name}/reserved-bit/{bit}",
                    put(1 << bit),
                    f"{f.name} flags: bit {bit} is reserved",
                    covers=covers,
                )

    def enum(self, f: FrameField, put: Callable[[int], bytes], top: int) -> None:
        assert f.enum is not None
        values = [int(v.value) for v in f.enum.values]
        covers = {"owner": self.fr.name, "field": f.name, "check": "enum", "bound": f.enum.name}
        for value in values:
            self.add(
                f"{f.name}/enum/value-{value}",
                put(value),
                f"{f.name} enum {f.enum.name}",
                covers=covers,
            )
        for other in sorted({max(values) + 1, 256, top} - set(values)):
            if other <= top:
                self.add(
                    f"{f.name}/enum/{other}",
                    put(other),
                    f"{f.name} enum {f.enum.name}",
                    covers=covers,
                )


def _directions(p: Protocol, fr: Frame) -> dict[str, int]:
    """Sender id -> the value its frames' direction field must carry (``client_to_server``)."""
    out: dict[str, int] = {}
    for f in fr.header:
        if f.enum is None:
            continue
        for v in f.enum.values:
            for s in p.senders:
                if v.py_name.lower().startswith(f"{s.id}_to_"):
                    out[s.id] = int(v.value)
    return out
