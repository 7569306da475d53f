"""An iterative reader of JSON text, for the codec's error path.

msgspec and ``json`` recurse once for each level of nesting, against Python's recursion limit,
so how deep a text they can read depends on how deep the caller's stack already is. The error
path must not: ``scan`` reads a text of any depth with a stack of its own, says what the error
path needs (the first place it is not JSON, whether a number no float holds comes before it,
every top-level ``type``), and gives a copy cut to a bound that msgspec may read instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

import msgspec

__all__ = ["Scan", "Shown", "scan", "scan_if_deeper"]

# A token after optional whitespace: a string, a number, a literal or a punctuator. Possessive
# repeats: an unterminated string fails at once, with no backtracking.
_TOKEN: Final = re.compile(
    r"""[ \t\n\r]*+(?:
        ("(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+")
      | (-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][+-]?[0-9]++)?)
      | (true|false|null)
      | ([\[\]{},:])
    )""",
    re.VERBOSE,
)
_SPACE: Final = re.compile(r"[ \t\n\r]*+")
_STRING: Final = msgspec.json.Decoder(str).decode

# What the reader expects next: a value, an item or `]`, a key or `}`, a key, `:`, `,` or the
# container's end, nothing but whitespace.
_VALUE, _FIRST_ITEM, _FIRST_KEY, _KEY, _COLON, _NEXT, _END = range(7)


class Shown:
    """A top-level ``type`` that is not a string, as a message shows it (never equal to one)."""

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text


@dataclass(frozen=True, slots=True)
class Scan:
    """What ``scan`` found in a text, read in order up to the first place it is not JSON."""

    error: str | None
    """That place, worded as msgspec words it; None when the text is JSON."""
    overflow: bool
    """Whether a number no float holds (``1e400``) comes before any error."""
    types: list[object]
    """Every value of the top-level object's ``type`` key before any error, in order."""
    depth: int
    """The deepest nesting of arrays and objects read, the top-level value counted as 1."""
    shallow: str
    """The text with the contents of every array and object nested deeper than the bound
    left out (each stays, empty): no deeper than the bound + 1. Read it only if ``error`` is
    None."""


def scan_if_deeper(data: bytes | str, bound: int) -> Scan | None:
    """``scan(data, bound)`` if ``data`` nests deeper than ``bound`` + 1, else None (counting
    the openings first, strings included, spares the scan of most texts)."""
    if isinstance(data, str):
        openings = data.count("[") + data.count("{")
    else:
        openings = data.count(b"[") + data.count(b"{")
    if openings <= bound + 1:
        return None
    found = scan(data, bound)
    return found if found.depth > bound + 1 else None


def scan(data: bytes | str, bound: int) -> Scan:
    """Read ``data`` (UTF-8) as one JSON value, with a stack of its own: no depth makes it
    recurse. ``bound`` is the deepest nesting whose contents ``Scan.shallow`` keeps.
    """
    text = data if isinstance(data, str) else data.decode("utf-8")
    stack: list[str] = []
    pieces: list[str] = []
    kept = 0  # text[kept:] is still to be copied into pieces
    expect = _VALUE
    key: str | None = None
    types: list[object] = []
    overflow = False
    deepest = 0
    pos = 0
    error: str | None = None
    while expect != _END:
        found = _TOKEN.match(text, pos)
        if found is None:
            pos = _space(text, pos)
            error = "Input data was truncated" if pos == len(text) else _at("invalid", text, pos)
            break
        string, number, literal, mark = found.groups()
        start, pos = found.start(found.lastindex or 0), found.end()
        if string is not None and "\\u" in string and not _escapes_hold(string):
            error = _at("invalid escape", text, start)
            break
        if expect in (_FIRST_KEY, _KEY) and string is not None:
            if len(stack) == 1:
                key = _string(string)
            expect = _COLON
            continue
        if mark == "," and expect == _NEXT:
            expect = _VALUE if stack[-1] == "[" else _KEY
            continue
        if mark == ":" and expect == _COLON:
            expect = _VALUE
            continue
        if mark in ("[", "{") and expect in (_VALUE, _FIRST_ITEM):
            stack.append(mark)
            deepest = max(deepest, len(stack))
            if len(stack) == bound + 1:
                pieces.append(text[kept:pos])
            expect = _FIRST_ITEM if mark == "[" else _FIRST_KEY
            continue
        if mark in ("]", "}"):
            opened = "[" if mark == "]" else "{"
            if not stack or stack[-1] != opened or expect not in (_NEXT, _FIRST_ITEM, _FIRST_KEY):
                dangling = (
                    stack and stack[-1] == opened and expect == (_VALUE if mark == "]" else _KEY)
                )
                kind = "trailing comma in " + ("array" if mark == "]" else "object")
                error = _at(kind if dangling else "invalid", text, start)
                break
            if len(stack) == bound + 1:
                kept = start
            stack.pop()
            shown = "an array" if mark == "]" else "an object"
        elif mark is None and expect in (_VALUE, _FIRST_ITEM):
            shown = number or literal or ""
            if number is not None and not overflow and not number.lstrip("-").isdigit():
                overflow = math.isinf(float(number))  # a float msgspec reads as out of range
        else:
            error = _at("invalid", text, start)
            break
        # A value is complete: it may be the top-level object's `type`.
        if len(stack) == 1 and key == "type":
            types.append(_STRING(string) if string is not None else Shown(shown))
        expect = _NEXT if stack else _END
    if error is None:
        pos = _space(text, pos)
        if pos != len(text):
            error = _at("trailing characters", text, pos)
    pieces.append(text[kept:])
    return Scan(error, overflow, types, deepest, "".join(pieces))


def _string(token: str) -> str:
    return token[1:-1] if "\\" not in token else _STRING(token)


def _escapes_hold(token: str) -> bool:
    """Whether a string's ``\\u`` escapes are whole characters (no lone surrogate)."""
    try:
        _STRING(token)
    except msgspec.DecodeError:
        return False
    return True


def _space(text: str, pos: int) -> int:
    found = _SPACE.match(text, pos)
    return found.end() if found else pos


def _at(what: str, text: str, pos: int) -> str:
    if what == "invalid":
        what = "invalid character"
    return f"JSON is malformed: {what} (byte {len(text[:pos].encode('utf-8'))})"
