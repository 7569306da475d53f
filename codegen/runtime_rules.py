"""The runtime's value rules, read from their source file instead of imported from ``voxwire``.

The vector builder and the conformance runner share one JSON equality (``json_equal`` in
``runtime/voxwire/_rules.py``). Codegen loads that one leaf module by path, so it never imports
the package it generates: the generator runs in a fresh clone, before its output exists or the
package is installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["RULES_PATH", "json_equal"]

RULES_PATH = Path(__file__).resolve().parent.parent / "runtime" / "voxwire" / "_rules.py"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("codegen._voxwire_rules", RULES_PATH)
    assert spec is not None and spec.loader is not None, RULES_PATH
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


json_equal: Callable[[Any, Any], bool] = _load().json_equal
"""JSON equality: numbers by value, booleans apart from numbers, date-times by instant."""
