# The decode gate of voxwire._codec and voxwire._rules.flat_object, in C (_speedups.c).
from collections.abc import Callable
from typing import Any

__all__ = ["Gate", "flat_object"]

class Gate:
    def __init__(
        self,
        *,
        decode: Callable[[str], Any],
        explain: Callable[[Exception, Any], Any],
        other: Callable[[Any], Any],
        quarter: int,
    ) -> None: ...
    def __call__(self, data: Any, /) -> Any: ...

def flat_object(value: object, /) -> bool: ...
