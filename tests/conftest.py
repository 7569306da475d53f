"""Shared fixtures: the repository, its specs, and the resolved protocols."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from codegen.ir import Protocol
from codegen.pipeline import load_protocols
from tests.servers import RedisServer, start_redis

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ROOT.parent / "shared" / "protocols"
"""The protocol documents the spec is written from: beside the repository, never in it."""


def read_document(name: str) -> str:
    """The text of one protocol document; the test skips where the documents are absent.

    A user's clone has no ``../shared``; CI has, so there (``CI`` set) a missing document fails.
    """
    path = DOCUMENTS / name
    if not path.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing; CI checks the spec against the protocol documents")
        pytest.skip(f"compares the spec with {name}, which is not here (no {DOCUMENTS})")
    return path.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def protocols() -> dict[str, Protocol]:
    """Both specs, loaded, checked and resolved."""
    return {p.id: p for p in load_protocols(ROOT)}


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One real redis-server on loopback for the session (tests/servers.py); a test that needs
    it empty calls ``redis_server.flush()``."""
    yield from start_redis(tmp_path_factory.mktemp("redis"))


LONGEST_FIRST = (
    "test_under_load.py",
    "test_cluster_rolling.py",
    "test_typescript_client_faults.py",
    "test_package.py",
    "test_audio.py",
    "test_fuzz_captures.py",
    "test_fuzz_differential.py",
)
"""The modules that take longest, started first: the suite's two workers (``-n 2 --dist
loadfile``) take modules in collection order, so a long module collected last would run alone
at the end while the other worker sits idle."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest in order
