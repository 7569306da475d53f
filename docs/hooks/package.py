"""mkdocs hook: mkdocstrings reads the package as the wheel lays it out, one folder.

The ``paths`` of the python handler (``runtime``, ``generated``) are the package's two halves.
Documentation tools cannot join them while ``generated/`` holds the type checkers' markers
(``__init__.pyi``, see docs/architecture.md): griffe takes such a marker for the package itself.
So this hook copies both halves into one temporary folder, the markers left out as the wheel
leaves them out, and points the handler there.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

__all__ = ["on_config"]


@event_priority(100)  # before mkdocstrings reads its configuration
def on_config(config: Any) -> None:
    """Replace the python handler's ``paths`` with one folder holding the merged package."""
    handler = config.plugins["mkdocstrings"].config.handlers["python"]
    base = Path(config.config_file_path).parent
    merged = Path(tempfile.mkdtemp(prefix="voxwire-docs-"))
    atexit.register(shutil.rmtree, merged, ignore_errors=True)
    ignore = shutil.ignore_patterns("__pycache__", "__init__.pyi")
    for folder in handler.get("paths", []):
        shutil.copytree(base / folder, merged, dirs_exist_ok=True, ignore=ignore)
    handler["paths"] = [str(merged)]
