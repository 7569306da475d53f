"""The decoders' C gate (``voxwire._speedups``) and its Python reference
(``voxwire._codec.python_gate``) answer every input alike.

Two processes, one on each gate (``VOXWIRE_NO_SPEEDUPS=1`` chooses the Python one), decode the
same deterministic fuzz inputs of every sender, each as str, bytes, bytearray and memoryview,
and objects that are no message at all; they must return equal messages and raise the same
errors, with the same code, text, path and ``__context__``.

msgspec counts its recursion against Python's limit, so what an input nested near that limit
gets depends on how deep the caller's stack is (and whether a call into C takes a level of it
differs between Python versions): inputs nested deeper than ``DEEP`` levels are left out of the
comparison, and counted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT

INPUTS_PER_SENDER = 1500
DEEP = 500

PROBE = """
import hashlib, itertools, json, re, sys
import fuzz

STRINGS = re.compile(rb'"(?:[^"\\\\]|\\\\.)*"')
LEVELS = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}

def depth(data):
    brackets = [LEVELS[b] for b in STRINGS.sub(b"", data) if b in LEVELS]
    return max(itertools.accumulate(brackets), default=0)

def verdict(decode, data):
    try:
        message = decode(data)
    except Exception as exc:
        context = type(exc.__context__).__name__ if exc.__context__ is not None else None
        return ["raised", type(exc).__name__, getattr(exc, "code", None), str(exc),
                getattr(exc, "path", None), context]
    return ["decoded", repr(message)]

digest, counts = hashlib.sha256(), {}
for target in fuzz.DECODERS:
    if target.sender is None:
        continue
    from importlib import import_module
    module = import_module(f"voxwire.{target.protocol}")
    gate = decode = module.decoder(target.sender)
    generate, _ = target.build(seed=7, time_bound=5.0)
    inputs = [generate() for _ in range(int(sys.argv[1]))]
    for data in inputs:
        if depth(data) > int(sys.argv[2]):
            counts["deep"] = counts.get("deep", 0) + 1
            continue
        text = data.decode("utf-8", "surrogatepass") if data.isascii() else None
        for form in (data, bytearray(data), memoryview(data), text):
            if form is not None:
                answer = verdict(decode, form)
                counts[answer[0]] = counts.get(answer[0], 0) + 1
                digest.update(json.dumps(answer).encode())
    for odd in (None, 5, [], type("S", (str,), {})('{"type":"x"}')):
        digest.update(json.dumps(verdict(decode, odd)).encode())
print(json.dumps({"gate": type(gate).__name__, "digest": digest.hexdigest(), "counts": counts}))
"""


def _answers() -> tuple[dict[str, object], dict[str, object]]:
    """The probe's answers through the Python gate and through the C gate, run side by side."""
    runs = []
    for no_speedups in (True, False):
        env = {k: v for k, v in os.environ.items() if k != "VOXWIRE_NO_SPEEDUPS"}
        if no_speedups:
            env["VOXWIRE_NO_SPEEDUPS"] = "1"
        runs.append(
            subprocess.Popen(
                [sys.executable, "-c", PROBE, str(INPUTS_PER_SENDER), str(DEEP)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env=env,
            )
        )
    answers = []
    try:
        for run in runs:
            out, err = run.communicate(timeout=300)
            assert run.returncode == 0, err
            answers.append(json.loads(out))
    finally:
        for run in runs:
            run.kill()
            run.wait()
    python, c = answers
    return python, c


def _built() -> bool:
    try:
        import voxwire._speedups  # noqa: F401
    except ImportError:
        return False
    return True


def test_the_c_gate_is_built_where_a_compiler_is() -> None:
    if os.environ.get("VOXWIRE_NO_SPEEDUPS"):
        pytest.skip("VOXWIRE_NO_SPEEDUPS is set: the Python gate is chosen")
    if not _built() and not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here: the install built no C gate (the Python one is used)")
    from voxwire import _codec, brisvox
    from voxwire._speedups import gate

    decode = brisvox.decoder("server")
    assert type(decode).__name__ == "builtin_function_or_method", decode
    assert type(decode.__self__).__name__ == "Gate"
    assert _codec._GATE is gate


def test_both_gates_answer_every_input_alike() -> None:
    if not _built():
        pytest.skip("the C gate is not built here: only the Python gate runs")
    python, c = _answers()
    assert (python["gate"], c["gate"]) == ("function", "builtin_function_or_method")
    counts = python["counts"]
    assert isinstance(counts, dict) and counts["decoded"] > 1000 and counts["raised"] > 1000
    assert counts["deep"] < INPUTS_PER_SENDER * 4 // 20, counts  # under 5% of the inputs
    assert c["counts"] == counts
    assert c["digest"] == python["digest"]


def _routes(gate_function: Any) -> Any:
    """A gate whose decode answers "direct" and whose other path answers "other"."""
    return gate_function(
        decode=lambda data: "direct",
        explain=lambda exc, data: "explained",
        other=lambda data: "other",
        quarter=4,
        limit=16,
    )


def _utf8_probes() -> list[bytes]:
    """Every one- and two-byte sequence, every three-byte one whose lead is E0..EF, and every
    four-byte one with each lead F0..F5 and each second byte (the ranges table 3-7 turns on)."""
    probes = [bytes([a]) for a in range(256)]
    probes += [bytes([a, b]) for a in range(256) for b in range(256)]
    probes += [
        bytes([a, b, c])
        for a in range(0xE0, 0xF0)
        for b in range(256)
        for c in (0x80, 0xBF, 0x7F, 0xC0)
    ]
    probes += [bytes([a, b, 0x80, 0xBF]) for a in range(0xF0, 0xF6) for b in range(256)]
    return probes


def test_both_gates_take_exactly_the_utf8_bytes_within_the_bound_straight() -> None:
    if not _built():
        pytest.skip("the C gate is not built here: only the Python gate runs")
    from voxwire._codec import python_gate
    from voxwire._speedups import gate

    c, python = _routes(gate), _routes(python_gate)
    for probe in _utf8_probes():
        try:
            probe.decode("utf-8")
        except UnicodeDecodeError:
            utf8 = False
        else:
            utf8 = True
        for data in (probe, b"a" * 9 + probe):  # alone, and after a run of ASCII
            expected = "direct" if utf8 and len(data) <= 16 else "other"
            assert (c(data), python(data)) == (expected, expected), data
    at_bound, past_it = "é".encode() * 8, "é".encode() * 8 + b"a"  # 16 and 17 bytes
    assert [c(at_bound), c(past_it)] == ["direct", "other"]
    assert [python(at_bound), python(past_it)] == ["direct", "other"]
    assert [c(bytearray(at_bound)), python(memoryview(at_bound))] == ["other", "other"]


class _Text(str):
    pass


class _Mapping(dict[str, object]):
    pass


FLAT_OR_NOT: list[object] = [
    {},
    {"a": "x", "b": 1, "c": True, "d": None, "e": 2**80},
    {"a": 1.5},
    {"a": []},
    {"a": {}},
    {1: "x"},
    {_Text("a"): 1},
    {"a": _Text("x")},
    _Mapping(a=1),
    [("a", 1)],
    "a",
    None,
]


def test_both_flat_object_tests_agree() -> None:
    if not _built():
        pytest.skip("the C gate is not built here: only the Python test runs")
    from voxwire._rules import python_flat_object
    from voxwire._speedups import flat_object

    answers = [(python_flat_object(v), flat_object(v)) for v in FLAT_OR_NOT]
    assert [p for p, _ in answers] == [True, True] + [False] * 10
    assert [c for _, c in answers] == [p for p, _ in answers]
