"""Every exception voxwire raises on purpose is a VoxwireError (voxwire.errors), so one
``except`` catches them all."""

from __future__ import annotations

import pickle

import pytest

from tests.public import public_modules, public_names
from voxwire.errors import HandshakeError, VoxwireError
from voxwire.ovp import client


def _voxwire_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class a public module exports that voxwire defines, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    for module in public_modules():
        for name in public_names(module):
            thing = getattr(module, name, None)
            if (
                isinstance(thing, type)
                and issubclass(thing, BaseException)
                and thing.__module__.split(".")[0] == "voxwire"
            ):
                found[f"{thing.__module__}.{thing.__qualname__}"] = thing
    return found


EXCEPTIONS = _voxwire_exceptions()


def test_the_walk_finds_the_exceptions_of_every_area() -> None:
    modules = {name.rsplit(".", 1)[0] for name in EXCEPTIONS}
    assert len(EXCEPTIONS) >= 20 and {"voxwire.errors", "voxwire.cli", "voxwire.capture"} < modules


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_every_public_exception_is_a_voxwire_error(name: str) -> None:
    assert issubclass(EXCEPTIONS[name], VoxwireError), f"{name} is not a VoxwireError"


def test_handshake_error_is_one_class_that_keeps_its_status_and_code_through_pickling() -> None:
    assert client.HandshakeError is HandshakeError
    refused = HandshakeError("the gateway answered HTTP 400", status=400, code="OVP_X")
    again = pickle.loads(pickle.dumps(refused))
    assert (str(again), again.status, again.code) == (str(refused), 400, "OVP_X")
