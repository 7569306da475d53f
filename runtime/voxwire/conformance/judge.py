"""Judging a conformance answer against its case's expectation, and the report of a run."""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from voxwire._rules import json_equal
from voxwire.conformance.vectors import Case

__all__ = ["Outcome", "Report", "check", "run", "shown"]

_SHOWN: Final = 400
"""Characters of a value shown in a failure report."""


def _check_steps(expected: list[Any], got: Any) -> str | None:
    """Why a session case's verdicts differ: the first step that differs, with both."""
    if not isinstance(got, list) or len(got) != len(expected):
        return f"expected {len(expected)} step verdicts, got {shown(got)}"
    for index, (want, have) in enumerate(zip(expected, got, strict=True)):
        if not json_equal(want, have):
            return f"step {index}: expected {shown(want)}, got {shown(have)}"
    return None


def check(expect: dict[str, Any], got: dict[str, Any]) -> str | None:
    """Why ``got`` does not meet ``expect``, or ``None`` when it does."""
    if "any_of" in expect:
        problems = [check(option, got) for option in expect["any_of"]]
        if any(problem is None for problem in problems):
            return None
        return "matches none of the accepted outcomes: " + "; ".join(p for p in problems if p)
    if "error" in got:
        return f"the testee failed: {got['error']}"
    if "steps" in expect:
        return _check_steps(expect["steps"], got.get("steps"))
    if got.get("valid") is not expect.get("valid"):
        return (
            "valid"
            if got.get("valid") is True
            else "invalid"
            if got.get("valid") is False
            else "no `valid`"
        )
    if not expect["valid"]:
        return None if got.get("code") == expect.get("code") else "another error code"
    for key in ("type", "header"):
        if key in expect and not json_equal(got.get(key), expect[key]):
            return f"another {key}"
    if bool(got.get("unknown", False)) is not bool(expect.get("unknown", False)):
        return "unknown" if got.get("unknown") else "not an unknown message"
    if got.get("encode_code") != expect.get("encode_code"):
        return f"encode of the decoded message: expected {expect.get('encode_code') or 'written'}"
    exact = bool(expect.get("exact", False))  # every string as written, a ts too
    if "value" in expect and not json_equal(got.get("value"), expect["value"], instants=not exact):
        return "another value"
    if "payload_hex" in expect and str(got.get("payload_hex", "")).lower() != expect["payload_hex"]:
        return "another payload"
    return None


def _unproven(case: Case, got: dict[str, Any]) -> str | None:
    """The transitions a session case claims to cover that the testee says it did not take
    (a testee that does not say, ``taken`` absent, is not judged on them)."""
    taken = got.get("taken")
    if case.kind != "session" or not isinstance(taken, list):
        return None
    missing = [c for c in case.data.get("covers", []) if c not in taken]
    if not missing:
        return None
    return f"it claims to cover {', '.join(missing)}, which the testee did not take"


@dataclass
class Outcome:
    """The result of one case."""

    case: Case
    got: dict[str, Any]
    problem: str | None
    expected_failure: str | None
    """The expected-failures note when the case is listed there, else ``None``."""

    @property
    def ok(self) -> bool:
        """As expected: it passed and is not listed, or it failed and is listed."""
        return (self.problem is None) is (self.expected_failure is None)


@dataclass
class Report:
    """Every outcome of a run."""

    outcomes: list[Outcome] = field(default_factory=list)
    unknown_expected: list[str] = field(default_factory=list)
    """Ids in the expected-failures list that name no case."""

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes) and not self.unknown_expected

    def lines(self, *, verbose: bool = False) -> list[str]:
        """The summary, a line per protocol and kind, then every unexpected result."""
        groups: dict[tuple[str, str], list[Outcome]] = collections.defaultdict(list)
        for o in self.outcomes:
            groups[(o.case.protocol, o.case.kind)].append(o)
        out = [
            _group_line(protocol, kind, items) for (protocol, kind), items in sorted(groups.items())
        ]
        for o in self.outcomes:
            if not o.ok or (verbose and o.expected_failure):
                out += _outcome_lines(o)
        for case_id in self.unknown_expected:
            out.append(f"UNKNOWN EXPECTED FAILURE {case_id}: no case has this id")
        total = len(self.outcomes)
        bad = sum(1 for o in self.outcomes if not o.ok) + len(self.unknown_expected)
        out.append(f"{'OK' if self.ok else 'FAILED'}: {total} cases, {bad} unexpected")
        return out


def _group_line(protocol: str, kind: str, items: list[Outcome]) -> str:
    """One protocol's cases of one kind: how many passed, failed, failed as listed, passed
    though listed."""
    passed = sum(1 for o in items if o.problem is None and o.expected_failure is None)
    xfail = sum(1 for o in items if o.problem is not None and o.expected_failure)
    failed = sum(1 for o in items if o.problem is not None and not o.expected_failure)
    stale = sum(1 for o in items if o.problem is None and o.expected_failure)
    text = f"{protocol} {kind}: {len(items)} cases, {passed} passed, {failed} failed"
    if xfail:
        text += f", {xfail} expected failures"
    if stale:
        text += f", {stale} listed as expected failures but passed"
    return text


def _outcome_lines(o: Outcome) -> list[str]:
    """What the report says of one outcome it shows."""
    if o.problem is None:
        return [
            f"PASSED BUT LISTED {o.case.id} ({o.expected_failure})",
            "  remove it from the expected-failures list",
        ]
    label = "EXPECTED FAILURE" if o.expected_failure else "FAIL"
    out = [
        f"{label} {o.case.id}: {o.problem}",
        f"  expected: {shown(o.case.expect)}",
        f"  got:      {shown(o.got)}",
        f"  source:   {o.case.data.get('source')} ({o.case.where})",
    ]
    if o.expected_failure:
        out.append(f"  listed:   {o.expected_failure}")
    return out


def shown(value: Any) -> str:
    """``value`` as JSON, cut to what a failure report shows."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def run(
    cases: Iterable[Case],
    ask: Callable[[Case], dict[str, Any]],
    expected_failures: dict[str, str] | None = None,
    known_ids: Iterable[str] | None = None,
) -> Report:
    """Ask for every case's answer and judge it.

    ``known_ids`` are the ids of every case loaded (before any filter): a listed id outside them
    is reported as unknown; a listed id filtered out is ignored.
    """
    listed = dict(expected_failures or {})
    cases = list(cases)
    report = Report()
    known = set(known_ids) if known_ids is not None else {c.id for c in cases}
    report.unknown_expected = sorted(i for i in listed if i not in known)
    for case in cases:
        got = ask(case)
        problem = check(case.expect, got) or _unproven(case, got)
        report.outcomes.append(Outcome(case, got, problem, listed.get(case.id)))
    return report
