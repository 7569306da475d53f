"""Structure-aware mutation of JSON messages and binary frames.

A seed is parsed into a tree whose objects keep their pairs in order (so a key can be repeated),
one to three mutations change the tree (types, keys, repetition, depth, numbers, strings), the
tree is written in one of several spellings (escapes, whitespace, number forms), and sometimes the
bytes are mutated too (encodings, invalid UTF-8, truncation, sizes at the bound). Everything is
drawn from one ``random.Random``: a seed gives the same inputs on every machine.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["FrameMutator", "MessageMutator", "Nest", "Number", "Pairs", "write"]


class Pairs(list[tuple[str, Any]]):
    """A JSON object as its pairs in order: a key may be repeated, as on the wire."""


@dataclass(frozen=True)
class Number:
    """A number written exactly as ``text`` (1e15, 1.0, -0, 1E400)."""

    text: str


DEPTHS: Final = (2, 63, 64, 65, 126, 127, 128, 129, 300, 990, 1000, 2000)
INTEGERS: Final = (
    0,
    -1,
    1,
    255,
    256,
    65535,
    65536,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**53 - 1,
    2**53,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63) - 1,
    10**30,
)
NUMBER_SPELLINGS: Final = (
    "1.0",
    "1e2",
    "1E2",
    "-0",
    "-0.0",
    "0e0",
    "1e15",
    "1e16",
    "1e308",
    "1e309",
    "-1e309",
    "1e-400",
    "-1e-400",
    "5e-324",
    "0.1",
    "1.5",
    "1E+2",
    "100.50",
    "0.00001",
    "0.000001",
    "2.5e-8",
    "9007199254740993.0",
    "12345678901234567890.0",
    "1.7976931348623157e308",
    "9" * 400,
    "-" + "9" * 30,
    "1." + "0" * 50,
)
STRINGS: Final = (
    "",
    " ",
    "\t\n",
    "x",
    "é",
    "😀",
    "\u2028",
    "\x00",
    "\x1f",
    '"',
    "\\",
    "type",
    "say",
    "ovps_01HZK3M8Q2W7R4T6Y9B1C5D8E0",
    "2026-05-14T12:34:56Z",
    "2026-05-14T12:34:56.000+0530",
    "2026-05-14T12:34:56+05:30",
    "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59.9999999Z",
    "9999-12-31T23:59:59.999999Z",
    "2026-02-30T00:00:00Z",
    "2026-05-14T24:00:00Z",
    "2026-05-14T12:34:56",
    "2026-05-14t12:34:56z",
    "2026-05-14 12:34:56Z",
    "2026-05-14T12:34:56.1234567891234Z",
    "2026-05-14T12:34:56+23:59",
    "2026-05-14T12:34:56+24:00",
)
RAW_STRINGS: Final = (
    r'"\ud800"',
    r'"\udc00"',
    r'"\ud800\udc00"',
    r'"\u0000"',
    r'"\/"',
    r'"\x"',
    r'"\u12"',
    r'"typ\u0065"',
)
BAD_BYTES: Final = (b"\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80")
SCALARS: Final = (None, True, False)


def write(value: Any, *, ascii_only: bool = False, spaced: bool = False) -> str:
    """Write a tree as JSON text, iteratively (a tree may be thousands of levels deep)."""
    comma, colon = (", ", ": ") if spaced else (",", ":")
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if item.__class__ is str:
            out.append(item)
        elif isinstance(item, Nest):
            opening, closing = ('{"a":', "}") if item.as_object else ("[", "]")
            inner = item.value
            inner = inner if isinstance(inner, list | Nest) else _scalar(inner, ascii_only)
            stack += [closing * item.depth, inner, opening * item.depth]
        elif isinstance(item, list):
            is_object = isinstance(item, Pairs)
            parts: list[Any] = ["{" if is_object else "["]
            for i, child in enumerate(item):
                if i:
                    parts.append(comma)
                if is_object:
                    key, child = child
                    parts.append(json.dumps(key, ensure_ascii=ascii_only) + colon)
                parts.append(
                    child if isinstance(child, list | Nest) else _scalar(child, ascii_only)
                )
            parts.append("}" if is_object else "]")
            stack.extend(reversed(parts))
        else:
            out.append(_scalar(item, ascii_only))
    return "".join(out)


def _scalar(item: Any, ascii_only: bool) -> str:
    if isinstance(item, Number | _RawString):
        return item.text
    if isinstance(item, float) and (item != item or abs(item) == float("inf")):
        return "null"
    return json.dumps(item, ensure_ascii=ascii_only)


@dataclass(frozen=True)
class Nest:
    """``value`` inside ``depth`` arrays (or objects ``{"a": ...}``), written without a tree."""

    depth: int
    value: Any
    as_object: bool


@dataclass(frozen=True)
class _RawString:
    text: str
    """A string token written as is: escapes JSON may or may not allow."""


def parse(text: bytes) -> Any:
    """A seed as a tree, or ``None`` when it is no JSON (byte mutations still use it)."""
    try:
        return json.loads(text, object_pairs_hook=Pairs)
    except (ValueError, RecursionError):
        return None


class MessageMutator:
    """Mutated text messages for one sender, from its seeds.

    Args:
        rng: The one source of randomness.
        seeds: Text messages to start from.
        types: Every wire type of the protocol (the sender's and the other side's).
        limit: The protocol's largest message in bytes (inputs cross it on both sides).
    """

    def __init__(
        self, rng: random.Random, seeds: Sequence[bytes], types: Sequence[str], limit: int
    ) -> None:
        self._rng = rng
        self._seeds = list(seeds)
        self._trees = [t for t in map(parse, self._seeds) if t is not None]
        self._types = list(types)
        self._limit = limit
        self._tree_mutations: list[Callable[[Any], Any]] = [
            self._retype,
            self._drop_key,
            self._add_key,
            self._repeat_key,
            self._change_tag,
            self._repeat_items,
            self._deepen,
            self._number,
            self._string,
            self._splice,
            self._swap,
        ]
        self._byte_mutations: list[Callable[[bytes], bytes]] = [
            self._truncate,
            self._flip,
            self._insert_bad_utf8,
            self._reencode,
            self._pad_to_bound,
            self._grow_on_rewrite,
            self._append,
        ]

    def __call__(self) -> bytes:
        rng = self._rng
        if not self._trees or rng.random() < 0.1:
            return self._bytes_only()
        tree = _copy(rng.choice(self._trees))
        for _ in range(rng.choice((0, 1, 1, 1, 1, 2, 3))):  # 0: the seed in another spelling
            tree = rng.choice(self._tree_mutations)(tree)
        text = write(tree, ascii_only=rng.random() < 0.3, spaced=rng.random() < 0.1).encode(
            "utf-8", "surrogatepass"
        )
        if rng.random() < 0.15:
            text = rng.choice(self._byte_mutations)(text)
        return text

    def _bytes_only(self) -> bytes:
        text = self._rng.choice(self._seeds)
        return self._rng.choice(self._byte_mutations)(text)

    # -- the tree ------------------------------------------------------------------------------

    def _nodes(self, tree: Any) -> list[tuple[Any, Any]]:
        """Every (container, key or index) in the tree, breadth first, at most 200."""
        found: list[tuple[Any, Any]] = []
        queue = [tree]
        while queue and len(found) < 200:
            node = queue.pop(0)
            if isinstance(node, Pairs):
                for i, (_, child) in enumerate(node):
                    found.append((node, i))
                    queue.append(child)
            elif isinstance(node, list):
                for i, child in enumerate(node):
                    found.append((node, i))
                    queue.append(child)
        return found

    def _set(self, tree: Any, make: Callable[[Any], Any]) -> Any:
        nodes = self._nodes(tree)
        if not nodes:
            return make(tree)
        parent, where = self._rng.choice(nodes)
        if isinstance(parent, Pairs):
            key, old = parent[where]
            parent[where] = (key, make(old))
        else:
            parent[where] = make(parent[where])
        return tree

    def _value(self) -> Any:
        rng = self._rng
        kind = rng.randrange(8)
        if kind == 0:
            return rng.choice(SCALARS)
        if kind == 1:
            return rng.choice(INTEGERS)
        if kind == 2:
            return Number(rng.choice(NUMBER_SPELLINGS))
        if kind == 3:
            return rng.choice(STRINGS)
        if kind == 4:
            return _RawString(rng.choice(RAW_STRINGS))
        if kind == 5:
            return [rng.choice(INTEGERS)] * rng.choice((0, 1, 2, 129))
        if kind == 6:
            return Pairs([("type", rng.choice(self._types)), ("x", rng.random())])
        return rng.uniform(-1e6, 1e6)

    def _retype(self, tree: Any) -> Any:
        return self._set(tree, lambda _old: self._value())

    def _objects(self, tree: Any) -> list[Pairs]:
        objects = [tree] if isinstance(tree, Pairs) else []
        objects += [p[w][1] if isinstance(p, Pairs) else p[w] for p, w in self._nodes(tree)]
        return [o for o in objects if isinstance(o, Pairs)]

    def _drop_key(self, tree: Any) -> Any:
        objects = [o for o in self._objects(tree) if o]
        if objects:
            target = self._rng.choice(objects)
            del target[self._rng.randrange(len(target))]
        return tree

    def _add_key(self, tree: Any) -> Any:
        objects = self._objects(tree)
        if objects:
            key = self._rng.choice(("type", "pad", "", "seq", "typ\u0065", "é", "id", "x" * 300))
            self._rng.choice(objects).insert(self._rng.randrange(8), (key, self._value()))
        return tree

    def _repeat_key(self, tree: Any) -> Any:
        objects = [o for o in self._objects(tree) if o]
        if objects:
            target = self._rng.choice(objects)
            key, value = target[self._rng.randrange(len(target))]
            again = value if self._rng.random() < 0.4 else self._value()
            target.insert(self._rng.randrange(len(target) + 1), (key, again))
        return tree

    def _change_tag(self, tree: Any) -> Any:
        if isinstance(tree, Pairs):
            tags: list[Any] = [*self._types, "", "x.unknown", 5, None, [], Pairs()]
            tag = self._rng.choice(tags)
            spot = [i for i, (k, _) in enumerate(tree) if k == "type"]
            if spot and self._rng.random() < 0.7:
                tree[self._rng.choice(spot)] = ("type", tag)
            else:
                tree.insert(self._rng.randrange(len(tree) + 1), ("type", tag))
        return tree

    def _repeat_items(self, tree: Any) -> Any:
        arrays = [tree] if isinstance(tree, list) and not isinstance(tree, Pairs) else []
        for parent, where in self._nodes(tree):
            child = parent[where][1] if isinstance(parent, Pairs) else parent[where]
            if isinstance(child, list) and not isinstance(child, Pairs):
                arrays.append(child)
        if arrays:
            target = self._rng.choice(arrays)
            count = self._rng.choice((0, 2, 33, 65, 129))
            items = target or [self._value()]
            # Repeated items share their subtrees: repeating twice nests, and the written text
            # would grow as a power. Keep what this array writes within a few bounds.
            count = min(count, 4 * self._limit // (len(write(items)) + 1))
            target[:] = items * count
        return tree

    def _deepen(self, tree: Any) -> Any:
        depth = self._rng.choice(DEPTHS)
        as_object = self._rng.random() < 0.3

        return self._set(tree, lambda old: Nest(depth, old, as_object))

    def _number(self, tree: Any) -> Any:
        choice = self._rng.random()
        if choice < 0.4:
            return self._set(tree, lambda _old: self._rng.choice(INTEGERS))
        if choice < 0.8:
            return self._set(tree, lambda _old: Number(self._rng.choice(NUMBER_SPELLINGS)))
        return self._set(tree, lambda _old: self._rng.uniform(-1e20, 1e20))

    def _string(self, tree: Any) -> Any:
        rng = self._rng

        def make(old: Any) -> Any:
            choice = rng.random()
            if choice < 0.5:
                return rng.choice(STRINGS)
            if choice < 0.7:
                return _RawString(rng.choice(RAW_STRINGS))
            unit = rng.choice(("a", "é", "€", "😀", " ", "\\"))
            return unit * rng.choice((1, 64, 65, 128, 129, 256, 4096, 4097, 16385))

        return self._set(tree, make)

    def _splice(self, tree: Any) -> Any:
        donor = self._rng.choice(self._trees)
        nodes = self._nodes(donor)
        if not nodes:
            return tree
        parent, where = self._rng.choice(nodes)
        part = _copy(parent[where][1] if isinstance(parent, Pairs) else parent[where])
        return self._set(tree, lambda _old: part)

    def _swap(self, tree: Any) -> Any:
        objects = [o for o in self._objects(tree) if len(o) > 1]
        if objects:
            target = self._rng.choice(objects)
            i, j = self._rng.sample(range(len(target)), 2)
            (ki, vi), (kj, vj) = target[i], target[j]
            target[i], target[j] = (ki, vj), (kj, vi)
        return tree

    # -- the bytes -----------------------------------------------------------------------------

    def _truncate(self, text: bytes) -> bytes:
        return text[: self._rng.randrange(len(text) + 1)]

    def _flip(self, text: bytes) -> bytes:
        if not text:
            return b"{"
        data = bytearray(text)
        for _ in range(self._rng.choice((1, 1, 2, 8))):
            data[self._rng.randrange(len(data))] = self._rng.randrange(256)
        return bytes(data)

    def _insert_bad_utf8(self, text: bytes) -> bytes:
        at = self._rng.randrange(len(text) + 1)
        return text[:at] + self._rng.choice(BAD_BYTES) + text[at:]

    def _reencode(self, text: bytes) -> bytes:
        choice = self._rng.randrange(4)
        if choice == 0:
            return b"\xef\xbb\xbf" + text  # a UTF-8 byte order mark
        if choice == 1:
            return text.decode("utf-8", "replace").encode("utf-16")
        if choice == 2:
            return b" \t\r\n" * self._rng.choice((1, 100)) + text + b"\n"
        return text.decode("utf-8", "replace").encode("utf-32-le")

    def _pad_to_bound(self, text: bytes) -> bytes:
        """Grow the text with a padding field to the bound, one over or one under it."""
        if not text.startswith(b"{"):
            return text
        unit = self._rng.choice(("a", "é", "😀", "\\n"))
        delta = self._rng.choice((-2, -1, 0, 1, 2))
        head = b'{"pad":"'
        need = self._limit + delta - len(text) - len(head) - 2
        if need <= 0:
            return text
        width = len(unit.encode()) if unit != "\\n" else 2
        fill = (unit * (need // width)).encode() + b"x" * (need % width)
        return head + fill + b'",' + text[1:]

    def _grow_on_rewrite(self, text: bytes) -> bytes:
        """Numbers voxwire writes longer than they were read (1e15 is 1000000000000000.0), up
        to just under the bound: the writing crosses it where the reading did not."""
        if not text.startswith(b"{"):
            return text
        spelled = self._rng.choice(("1e15", "1e2", "1e0", "1.5e1"))
        count = (self._limit - len(text) - 12 + self._rng.choice((-3, 0, 3))) // (len(spelled) + 1)
        if count <= 0:
            return text
        return b'{"pad":[' + ",".join([spelled] * count).encode() + b"]," + text[1:]

    def _append(self, text: bytes) -> bytes:
        return text + self._rng.choice((b" ", b"{}", b",", text, b"\x00"))


def _copy(tree: Any) -> Any:
    """A deep copy of a tree, iteratively."""
    if not isinstance(tree, list):
        return tree
    root: list[Any] = Pairs() if isinstance(tree, Pairs) else []
    stack: list[tuple[list[Any], list[Any]]] = [(tree, root)]
    while stack:
        source, target = stack.pop()
        for item in source:
            if isinstance(source, Pairs):
                key, child = item
            else:
                key, child = None, item
            if isinstance(child, list):
                fresh: list[Any] = Pairs() if isinstance(child, Pairs) else []
                stack.append((child, fresh))
                child = fresh
            target.append((key, child) if isinstance(source, Pairs) else child)
    return root


class FrameMutator:
    """Mutated binary frames, from the frame vectors."""

    def __init__(self, rng: random.Random, seeds: Sequence[bytes]) -> None:
        self._rng = rng
        self._seeds = list(seeds)

    def __call__(self) -> bytes:
        rng = self._rng
        data = bytearray(rng.choice(self._seeds))
        for _ in range(rng.choice((0, 1, 1, 2, 4))):
            choice = rng.randrange(6)
            if choice == 0 and data:  # one header byte
                data[rng.randrange(min(12, len(data)))] = rng.choice((0, 1, 2, 7, 8, 0x80, 0xFF))
            elif choice == 1 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif choice == 2:
                del data[rng.randrange(len(data) + 1) :]
            elif choice == 3:
                data += bytes(rng.choice((1, 2, 640)))
            elif choice == 4 and len(data) >= 4:
                data[2:4] = rng.choice((b"\x00\x00", b"\x01\x00", b"\x02\x00", b"\xff\xff"))
            elif choice == 5:
                data = bytearray(rng.randbytes(rng.choice((0, 11, 12, 651, 652, 653))))
        return bytes(data)
