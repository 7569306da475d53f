# The decode gate of voxwire._codec and voxwire._rules.flat_object, in C (_speedups.c).
from collections.abc import Callable
from typing import Any

__all__ = ["flat_object", "gate"]

def gate(
    *,
    decode: Callable[[bytes | str], Any],
    explain: Callable[[Exception, Any], Any],
    other: Callable[[Any], Any],
    quarter: int,
    limit: int,
) -> Callable[[Any], Any]: ...
def flat_object(value: object, /) -> bool: ...
