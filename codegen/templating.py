"""What the Python-module renderer and the reference-page renderer share: views and groups."""

from __future__ import annotations

from typing import Any

__all__ = ["GROUP_TITLES", "Proxy"]

GROUP_TITLES = {
    "limits": "Limits",
    "timings": "Timings",
    "audio": "Audio",
    "protocol": "Protocol",
    "security": "Security",
}
"""The constant groups of a spec, in the order every output lists them, with their titles."""


class Proxy:
    """An object whose attributes are the IR object's, some replaced (for a template's view)."""

    def __init__(self, base: object, **overrides: Any) -> None:
        self._base = base
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._base, name)
