"""How deep a text nests, measured without a parser: the codec's error path asks it first.

msgspec and ``json`` recurse once for each level of nesting, against Python's recursion limit,
so how deep a text they can read depends on how deep the caller's stack already is. A text
deeper than the read depth is malformed whatever else it holds (spec decisions ``read-depth``
and ``rule-order``); the codec asks ``deeper_than`` before it reads a refused text again.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Final

__all__ = ["deeper_than"]

_NOT_BRACKET: Final = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEP: Final = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


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
