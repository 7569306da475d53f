"""Shared fixtures: the repository, its specs, and the resolved protocols."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.ir import Protocol
from codegen.pipeline import load_protocols

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ROOT.parent / "shared" / "protocols"


@pytest.fixture(scope="session")
def protocols() -> dict[str, Protocol]:
    """Both specs, loaded, checked and resolved."""
    return {p.id: p for p in load_protocols(ROOT)}
