"""The public modules of voxwire, imported: what users may import and ``help()`` shows."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import voxwire


def public_modules() -> list[ModuleType]:
    """Every public module of the package (none under a ``_`` name, no ``__main__``), imported."""
    names = [m.name for m in pkgutil.walk_packages(voxwire.__path__, "voxwire.")]
    public = [n for n in names if not any(part.startswith("_") for part in n.split("."))]
    return [voxwire, *(importlib.import_module(name) for name in sorted(public))]


def public_names(module: ModuleType) -> set[str]:
    """The names users can reach in ``module``: its ``__all__`` and every other name without a
    leading ``_`` (an exception a public function raises may be left out of ``__all__``)."""
    listed: list[str] = getattr(module, "__all__", [])
    return {*listed, *(name for name in vars(module) if not name.startswith("_"))}
