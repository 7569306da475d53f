"""``python -m voxwire.conformance``: run the conformance vectors (see the package docstring)."""

from __future__ import annotations

import sys

from voxwire.conformance import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
