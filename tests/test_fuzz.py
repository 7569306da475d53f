"""The fuzzing harness's short, deterministic run (the nightly run is ``python -m fuzz
--inputs 1000000``, docs/fuzzing.md): every decoder, one oracle, zero findings."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

import fuzz
from fuzz.mutate import Nest, Number, Pairs, write
from fuzz.oracle import MessageOracle
from voxwire import brisvox

INPUTS_PER_DECODER = 1000
"""Enough to reach every mutation many times; a few seconds a decoder on a loaded 2-core machine."""


@pytest.mark.parametrize("target", fuzz.DECODERS, ids=lambda t: t.name)
def test_the_fuzzer_finds_nothing(target: fuzz.Target, capsys: pytest.CaptureFixture[str]) -> None:
    report = fuzz.run([target], INPUTS_PER_DECODER, seed=0, time_bound=5.0)
    with capsys.disabled():
        print(f"\n{target.name}: {report.inputs} inputs fuzzed, {report.targets[0].verdicts}")
    assert report.inputs == INPUTS_PER_DECODER
    findings = [
        f"{f.kind} x{f.count}: {f.detail}\n  input: {f.data[:200]!r}"
        for f in report.targets[0].findings.values()
    ]
    assert not findings, "\n".join(findings)


def test_the_run_is_deterministic() -> None:
    first = fuzz.run([fuzz.DECODERS[1]], 300, seed=5)
    again = fuzz.run([fuzz.DECODERS[1]], 300, seed=5)
    assert first.targets[0].verdicts == again.targets[0].verdicts


def test_the_oracle_can_fail() -> None:
    """A decoder that lets another exception escape is caught (the harness is no rubber stamp)."""

    def broken(data: object) -> object:
        raise KeyError("type")

    module = SimpleNamespace(
        decoder=lambda sender: broken,
        encode=brisvox.encode,
        ErrorCode=brisvox.ErrorCode,
        MAX_MESSAGE_BYTES=brisvox.MAX_MESSAGE_BYTES,
    )
    judge = MessageOracle(module, "agent", 5.0, random.Random(0))
    outcome = judge(b'{"type":"x"}')
    assert [f.kind for f in outcome.findings] == ["escape"] * 4


def test_the_writer_keeps_repeated_keys_spellings_and_depth() -> None:
    tree = Pairs([("type", "a"), ("type", 5), ("n", Number("1e15")), ("d", Nest(3, [], False))])
    assert write(tree) == '{"type":"a","type":5,"n":1e15,"d":[[[[]]]]}'
    assert write(Pairs([("é", "é")]), ascii_only=True) == '{"\\u00e9":"\\u00e9"}'
