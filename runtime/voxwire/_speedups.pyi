# The decode gate of voxwire._codec, in C (runtime/voxwire/_speedups.c).
from collections.abc import Callable
from typing import Any

__all__ = ["Gate"]

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
