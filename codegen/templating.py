"""What the renderers (Python modules, reference pages, TypeScript) share: views and groups."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from codegen.ir import Constant, Protocol

__all__ = ["GROUP_TITLES", "Proxy", "constant_groups"]

GROUP_TITLES = {
    "limits": "Limits",
    "timings": "Timings",
    "audio": "Audio",
    "protocol": "Protocol",
    "security": "Security",
}
"""The constant groups of a spec, in the order every output lists them, with their titles."""


def constant_groups(p: Protocol) -> list[tuple[str, list[Constant]]]:
    """``p``'s constants by group, ``(title, constants)`` in :data:`GROUP_TITLES` order; a
    group without constants is left out."""
    groups = [
        (title, [c for c in p.constants if c.group == g]) for g, title in GROUP_TITLES.items()
    ]
    return [(title, members) for title, members in groups if members]


class Proxy:
    """An object whose attributes are the IR object's, some replaced (for a template's view)."""

    def __init__(self, base: object, **overrides: Any) -> None:
        self._base = base
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._base, name)
