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
from itertools import accumulate
from typing import Final

import msgspec

__all__ = ["Scan", "Shown", "deeper_than", "scan", "scan_if_deeper"]

# A token after optional whitespace: a string (with the `:` after it, if one follows: a key), a
# number, a literal or a punctuator (a run of `[`, `]` or `}` is one: deep nesting reads fast).
# Possessive repeats: an unterminated string fails at once, with no backtracking.
_TOKEN: Final = re.compile(
    r"""[ \t\n\r]*+(?:
        ("(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+")([ \t\n\r]*+:)?
      | (-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][+-]?[0-9]++)?)
      | (true|false|null)
      | (\[(?:[ \t\n\r]*+\[)*+|\](?:[ \t\n\r]*+\])*+|\}(?:[ \t\n\r]*+\})*+|[{,:])
    )""",
    re.VERBOSE,
)
_SPACE: Final = re.compile(r"[ \t\n\r]*+")
_NOT_BRACKET: Final = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEP: Final = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
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
    """That place, worded like msgspec's complaints (the byte counted in UTF-8); None when the
    text is JSON."""
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
    """``scan(data, bound)`` if ``data`` nests deeper than ``bound`` + 1, else None: only a
    text that ``deeper_than`` finds that deep is scanned."""
    if not deeper_than(data, bound + 1):
        return None
    found = scan(data, bound)
    return found if found.depth > bound + 1 else None


def deeper_than(data: bytes | str, bound: int) -> bool:
    """Whether ``data`` nests arrays and objects deeper than ``bound`` outside strings, its
    outermost counted as 1: exact as far as the text is JSON, and with no recursion.

    Most texts hold too few openings to nest that deep; the rest are measured by their
    brackets outside strings, at C speed.
    """
    blob = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return blob.count(b"[") + blob.count(b"{") > bound and _bracket_depth(blob) > bound


def _bracket_depth(blob: bytes) -> int:
    """The deepest nesting of the brackets outside strings: exact as far as the text is JSON,
    so at least as deep as a reader goes before it stops on what is not."""
    # An escaped backslash, then an escaped quote, are no string's end.
    outside = b"".join(blob.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[::2])
    brackets = outside.translate(None, _NOT_BRACKET)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


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
        string, colon, number, literal, mark = found.groups()
        start, pos = found.start(1 if string is not None else found.lastindex or 0), found.end()
        if string is not None and "\\u" in string and not _escapes_hold(string):
            error = _at("invalid escape", text, start)
            break
        if expect in (_FIRST_KEY, _KEY) and string is not None:
            if len(stack) == 1:
                key = _string(string)
            expect = _VALUE if colon else _COLON
            continue
        if colon and expect in (_VALUE, _FIRST_ITEM):  # a string value, then `:`
            error = _at("invalid", text, pos - 1)
            break
        if mark == "," and expect == _NEXT:
            expect = _VALUE if stack[-1] == "[" else _KEY
            continue
        if mark == ":" and expect == _COLON:
            expect = _VALUE
            continue
        if mark and mark[0] in "[{" and expect in (_VALUE, _FIRST_ITEM):
            depth = len(stack)
            stack.extend(mark[0] * mark.count(mark[0]))
            if depth <= bound < len(stack):  # the run opens the one at depth bound + 1
                pieces.append(text[kept : start + _index(mark, bound - depth) + 1])
            deepest = max(deepest, len(stack))
            expect = _FIRST_ITEM if mark[0] == "[" else _FIRST_KEY
            continue
        if mark and mark[0] in "]}":
            opened = "[" if mark[0] == "]" else "{"
            depth, count = len(stack), mark.count(mark[0])
            if expect not in (_NEXT, _FIRST_ITEM, _FIRST_KEY) or stack[-count:] != [opened] * count:
                error = _unclosed(stack, opened, mark, expect, text, start)
                break
            if depth - count <= bound < depth:  # the run closes the one at depth bound + 1
                kept = start + _index(mark, depth - bound - 1)
            del stack[-count:]
            shown = "an array" if opened == "[" else "an object"
            if not stack and depth > 1 and key == "type":  # `}}`: the last member ended too
                types.append(Shown(shown))
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


def _unclosed(stack: list[str], opened: str, run: str, expect: int, text: str, start: int) -> str:
    """Where a run of closing brackets stops closing what ``stack`` holds open."""
    closed, count = 0, run.count(run[0])
    while closed < count and closed < len(stack) and stack[-1 - closed] == opened:
        closed += 1
    if expect not in (_NEXT, _FIRST_ITEM, _FIRST_KEY):
        closed = 0
    kind = "array" if opened == "[" else "object"
    dangling = (
        closed == 0
        and stack
        and stack[-1] == opened
        and expect == (_VALUE if kind == "array" else _KEY)
    )
    return _at(
        f"trailing comma in {kind}" if dangling else "invalid", text, start + _index(run, closed)
    )


def _index(run: str, n: int) -> int:
    """Where the ``n``-th bracket (from 0) of a run of brackets (and whitespace) is."""
    if len(run) == run.count(run[0]):
        return n
    at = -1
    for _ in range(n + 1):
        at = run.index(run[0], at + 1)
    return at


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
