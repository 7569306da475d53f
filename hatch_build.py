"""Builds the optional C gate of the decoders, ``voxwire._speedups``, into the wheel.

Where no C compiler is found the build goes on without it and voxwire runs its pure-Python
gate (the same behaviour, a Python call slower per message); ``VOXWIRE_NO_SPEEDUPS=1`` skips
it on purpose. An editable install builds it next to its source, runtime/voxwire/.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("runtime") / "voxwire" / "_speedups.c"
MODULE = "voxwire._speedups"


class SpeedupsHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("VOXWIRE_NO_SPEEDUPS"):
            return
        root = Path(self.root)
        self._scratch = tempfile.TemporaryDirectory(prefix="voxwire-speedups-")
        scratch = Path(self._scratch.name)
        into = root / "runtime" if version == "editable" else scratch / "lib"
        built = _compile(root / SOURCE, into, scratch / "temp")
        if built is None:
            print(
                "voxwire: the C gate did not build; the decoders use the Python one",
                file=sys.stderr,
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":
            build_data["force_include"][str(built)] = f"voxwire/{built.name}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:  # the wheel holds the extension now
            scratch.cleanup()


def _compile(source: Path, into: Path, temp: Path) -> Path | None:
    """The extension built into ``into`` (as its package's folder tree), or ``None``."""
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    extension = Extension(MODULE, [str(source)], optional=True)
    command = build_ext(Distribution({"name": "voxwire", "ext_modules": [extension]}))
    command.build_lib = str(into)
    command.build_temp = str(temp)
    command.ensure_finalized()
    command.run()
    return next((Path(p) for p in command.get_outputs() if Path(p).is_file()), None)
