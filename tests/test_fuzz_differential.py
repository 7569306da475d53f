"""The two bindings agree on every input (issue 28): the differential fuzzer's short run feeds the
same mutated inputs to the Python binding and to the TypeScript one (compiled from
generated/typescript, one node process) and requires the same verdict, the same error code and
the same re-encoded value. The long run is in docs/fuzzing.md."""

from __future__ import annotations

import pytest

import fuzz
from fuzz.differential import DifferentialReport, run_differential, table
from tests.node import tools

INPUTS_PER_DECODER = 2000
"""The CI slice: every family of the issue showed up within the first few hundred per decoder."""


def test_the_bindings_agree_on_every_input(capsys: pytest.CaptureFixture[str]) -> None:
    tools()  # the TypeScript compiler, from npm (skips without node)
    reports = run_differential(fuzz.DECODERS, INPUTS_PER_DECODER, seed=0)
    with capsys.disabled():
        print("\n" + table(reports))
    assert [r.inputs for r in reports] == [INPUTS_PER_DECODER] * len(fuzz.DECODERS)
    problems = [
        f"{r.name}: {d.kind} x{d.count}\n  python: {d.python}\n  typescript: {d.typescript}"
        f"\n  input: {d.data[:200]!r}"
        for r in reports
        for d in [*r.disagreements.values(), *r.escapes.values()]
    ]
    assert not problems, "\n".join(problems)


def test_a_different_code_a_different_value_and_an_escape_are_each_found() -> None:
    """The comparison is no rubber stamp: each kind of difference counts, key order does not."""
    report = DifferentialReport("brisvox-agent")
    said = '{"type":"tool.result","id":1,"result":9007199254740993}'
    ok = {"valid": True, "type": "tool.result", "text": said}
    report.add(b"a", ok, {**ok, "text": said.replace("993", "992")})
    report.add(b"b", {"valid": False, "code": "bad_message"}, {"valid": False, "code": "too_large"})
    report.add(b"c", ok, {"valid": True, "type": "tool.result", "encode_code": "too_large"})
    report.add(b"d", ok, {"escape": "decode: TypeError: x"})
    reordered = '{"id":1,"type":"tool.result","result":9007199254740993}'
    report.add(b"e", ok, {**ok, "text": reordered})
    report.add(b"f", {"valid": False, "code": "x", "detail": "one"}, {"valid": False, "code": "x"})
    assert report.inputs == 6
    assert sorted(report.disagreements) == [
        "accepted, written differently",
        "python accepted; typescript accepted, encode refused too_large",
        "python refused bad_message; typescript refused too_large",
    ]
    assert report.escaped == 1 and report.reordered == 1


@pytest.mark.parametrize(
    ("python", "typescript", "same"),
    [
        ('{"n":1.0}', '{"n":1}', False),
        ('{"n":100.0}', '{"n":1e2}', False),
        ('{"n":7.850791263456602e19}', '{"n":78507912634566020000}', False),
        ('{"n":9007199254740993}', '{"n":9007199254740992}', False),
        ('{"n":-0.0}', '{"n":0.0}', False),
        ('{"a":1,"b":[2.5,{"c":1e16,"d":null}]}', '{"b":[2.5,{"d":null,"c":1e16}],"a":1}', True),
        ('{"a":[1,2]}', '{"a":[2,1]}', False),
        ('{"b":true}', '{"b":1}', False),
        ('{"s":"1"}', '{"s":1}', False),
        ('{"ts":"2026-05-14T12:34:56Z"}', '{"ts":"2026-05-14T12:34:56.000Z"}', False),
    ],
)
def test_texts_are_compared_as_written_but_for_key_order(
    python: str, typescript: str, same: bool
) -> None:
    """Every number is spelled alike in both bindings (spec decision numbers-written-one-way):
    a double spelled another way is a disagreement, as a different value is."""
    report = DifferentialReport("ovp-client")
    ok = {"valid": True, "type": "x"}
    report.add(b"", {**ok, "text": python}, {**ok, "text": typescript})
    assert (report.reordered == 1) is same and (report.disagreeing == 0) is same
