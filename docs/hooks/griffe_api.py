"""griffe extension for the API page (docs/api.md): what the docstrings say, rendered as meant.

- A Sphinx role (``:class:`AgentSession```, ``:meth:`~voxwire.sansio.Close```) becomes a
  cross-reference: resolved from where the docstring is, then a link where the target is on a
  page, its name in code where it is not. ``help()`` keeps the roles, which read well as text.
- A function made a context manager by ``contextlib`` shows what ``async with`` / ``with``
  takes: ``AbstractAsyncContextManager[T]`` rather than the generator's ``AsyncIterator[T]``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from functools import partial
from typing import Any

import griffe

__all__ = ["ApiPage"]

ROLE = re.compile(r":(?:py:)?(?:class|meth|attr|func|mod|data|exc|obj|const):`(~?)([^`]+)`")
CONTEXT_MANAGERS = {
    "contextlib.asynccontextmanager": ("contextlib.AbstractAsyncContextManager", "async with"),
    "contextlib.contextmanager": ("contextlib.AbstractContextManager", "with"),
}


class ApiPage(griffe.Extension):
    """Rewrites every docstring's roles and every contextlib context manager's return type."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = ROLE.sub(partial(_link, obj), obj.docstring.value)
            if isinstance(obj, griffe.Function):
                _show_context_manager(obj)


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)  # type: ignore[arg-type]


def _link(obj: griffe.Object, role: re.Match[str]) -> str:
    short, target = role.group(1) == "~", role.group(2).strip()
    name = target.removesuffix("()")
    title = html.escape(target.rsplit(".", 1)[-1] if short else target)
    path = _resolve(obj, name)
    if path is None:
        return f"`{target.rsplit('.', 1)[-1] if short else target}`"
    return f'<autoref identifier="{path}" optional><code>{title}</code></autoref>'


def _resolve(obj: griffe.Object, name: str) -> str | None:
    if name.startswith("voxwire."):
        return name
    first, _, rest = name.partition(".")
    scope = obj if obj.is_class or obj.is_module else obj.parent
    try:
        found = scope.resolve(first) if scope is not None else None
    except griffe.NameResolutionError:
        return None
    return None if found is None else found + (f".{rest}" if rest else "")


def _show_context_manager(function: griffe.Function) -> None:
    for decorator in function.decorators:
        manager = CONTEXT_MANAGERS.get(decorator.callable_path)
        returns = function.returns
        if manager and isinstance(returns, griffe.ExprSubscript):
            kind, statement = manager
            function.returns = f"{kind}[{returns.slice}]"  # type: ignore[assignment]
            function.labels.discard("async")  # called, not awaited: the manager is entered
            function.labels.add(f"{statement}")
