"""The validate target's short run in CI (``python -m fuzz --target validate --inputs 100000``
is the long one, docs/fuzzing.md): mutated demo captures, zero findings, and an oracle that
does catch a traceback, a wrong exit status and a wrong count."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

import fuzz
from fuzz.captures import CaptureMutator, ValidateOracle, ValidateTarget, record_captures
from voxwire import cli, validate

CAPTURES = 2000
"""Every mutation many times over; about a minute on a loaded 2-core machine."""


def test_validate_survives_mutated_captures(capsys: pytest.CaptureFixture[str]) -> None:
    report = fuzz.run([ValidateTarget()], CAPTURES, seed=1, time_bound=5.0)
    target = report.targets[0]
    with capsys.disabled():
        print(f"\nvalidate: {target.inputs} captures in {target.seconds:.0f} s, {target.verdicts}")
    assert target.inputs == CAPTURES
    findings = [
        f"{f.kind} x{f.count}: {f.detail}\n  input: {f.data[:300]!r}"
        for f in target.findings.values()
    ]
    assert not findings, "\n".join(findings)
    assert set(target.verdicts) == {"accepted", "violations", "not a capture"}


@pytest.fixture(scope="module")
def inputs() -> list[bytes]:
    make = CaptureMutator(random.Random(3), record_captures())
    return [make() for _ in range(40)]


def test_the_oracle_catches_a_failure_of_voxwires_own(
    inputs: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: object, judgement: validate.Judgement) -> list[validate.Finding]:
        raise KeyError("seq")

    monkeypatch.setattr(validate._Findings, "of", broken)
    judge = ValidateOracle(5.0, random.Random(0))
    kinds = {f.kind for data in inputs for f in judge(data).findings}
    assert kinds == {"escape"}


def test_the_oracle_catches_an_exit_status_that_hides_violations(
    inputs: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = validate.check_capture

    def uncounted(*args: Any, **options: Any) -> tuple[Any, Iterator[validate.Finding]]:
        header, findings = real(*args, **options)
        found = list(findings)
        args[1].violations = 0  # printed, but not counted
        return header, iter(found)

    monkeypatch.setattr(cli, "check_capture", uncounted)
    judge = ValidateOracle(5.0, random.Random(0))
    details = [f.detail for data in inputs for f in judge(data).findings]
    assert details and all(d.startswith("exit 0, ") for d in details), details
