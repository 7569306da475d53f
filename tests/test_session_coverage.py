"""Every transition of every role's table has a session case, and the cases follow the tables
(docs/conformance.md, "Sessions"): a table changed without its cases fails the spec check at
the transition's line; a changed transition that the cases still follow changes both bindings'
tables and the Python core's behaviour, which the conformance runner then reports; a claim the
side's core does not take fails its case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codegen.ir import Protocol
from codegen.loader import SpecError
from codegen.pipeline import check, generate
from tests.conftest import ROOT
from voxwire.conformance import Case, VectorError, answer, load_cases, read_vectors, request, run

OVP = "spec/ovp.yaml"
ENDING = "        link_lost: end_undelivered\n        resume: {to: ending, decision: resume-after-session-end}\n"
"""The gateway's ``ending`` row: what a session.resume after session.end gets."""
DELIVERED = "      ending:\n        end_delivered: over\n"
CLIENT_IDLE = "      idle:\n        connect: starting\n        hang_up: over\n"


def _scratch(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of spec/ with ``old`` replaced by ``new`` in the OVP spec."""
    for source in sorted((ROOT / "spec").rglob("*")):
        if source.is_file() and "releases" not in source.parts:
            target = tmp_path / source.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    spec = tmp_path / OVP
    text = spec.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    spec.write_text(text.replace(old, new), encoding="utf-8")
    return tmp_path


def _refusal(root: Path) -> list[str]:
    with pytest.raises(SpecError) as caught:
        check(root)
    return [str(p) for p in caught.value.problems]


def _line(root: Path, text: str, after: str = "sessions:") -> int:
    """The number of the first line ``text`` after the first line ``after``."""
    lines = (root / OVP).read_text(encoding="utf-8").splitlines()
    start = lines.index(after)
    return lines.index(text, start) + 1


@pytest.fixture(scope="module")
def sessions() -> list[Case]:
    return [c for c in load_cases() if c.kind == "session"]


def test_every_transition_of_every_table_has_a_case_that_takes_it(
    protocols: dict[str, Protocol], sessions: list[Case]
) -> None:
    table = {
        f"{m.role} {t.source}.{t.input}"
        for p in protocols.values()
        for m in p.machines
        for t in m.transitions
    }
    taken = {claim for c in sessions for claim in answer(request(c))["taken"]}
    claimed = {claim for c in sessions for claim in c.data["covers"]}
    assert len(table) == 68
    assert table == claimed == taken & table


def test_each_case_claims_what_its_core_takes_in_order(sessions: list[Case]) -> None:
    for case in sessions:
        taken = answer(request(case))["taken"]
        assert list(dict.fromkeys(case.data["covers"])) == taken, case.id


def test_a_transition_without_a_case_is_refused_at_its_line(tmp_path: Path) -> None:
    root = _scratch(tmp_path, CLIENT_IDLE, CLIENT_IDLE + "        give_up: over\n")
    line = _line(root, "        give_up: over", after="      idle:")
    assert _refusal(root) == [
        f"{OVP}:{line}: sessions[0].transitions.idle.give_up: no session case covers this "
        "transition (codegen/sessions.py)"
    ]


def test_a_removed_transition_a_case_claims_is_refused(tmp_path: Path) -> None:
    root = _scratch(tmp_path, ENDING, "        link_lost: end_undelivered\n")
    line = _line(root, "  - role: gateway")
    assert _refusal(root) == [
        f"{OVP}:{line}: sessions[1].transitions.ending.resume: the session case "
        "ovp/session/gateway/resume-after-the-end-on-a-half-open-link claims this transition, "
        "which the machine lacks (codegen/sessions.py)"
    ]


def test_a_transition_leading_elsewhere_than_a_case_goes_on_is_refused(tmp_path: Path) -> None:
    """The issue's example: session.resume after session.end now ends the session. A case goes
    on from where the resume led (the link drops, another resume): the check names it."""
    root = _scratch(tmp_path, ENDING, ENDING.replace("{to: ending,", "{to: over,"))
    line = _line(root, "        resume: {to: over, decision: resume-after-session-end}")
    assert _refusal(root) == [
        f"{OVP}:{line}: sessions[1].transitions.ending.resume: the session case "
        "ovp/session/gateway/resume-after-the-end-on-a-half-open-link takes ending.link_lost "
        "after this transition, which leads to over (codegen/sessions.py)"
    ]
    with pytest.raises(SpecError):
        generate(root)
    assert not (root / "generated").exists()


def test_a_changed_transition_changes_both_tables_and_the_core(tmp_path: Path) -> None:
    """A delivered session.end now leaves the window running (``ending.end_delivered`` leads to
    ``end_undelivered``): no case goes on from it, so the spec check takes it and generate
    writes both bindings' tables; the Python core run from the scratch copy then lets a
    connection to the ended session in, and the conformance runner fails the case that pins
    the refusal (decision ended-session-id-taken), at that step."""
    changed = DELIVERED.replace("end_delivered: over", "end_delivered: end_undelivered")
    root = _scratch(tmp_path, DELIVERED, changed)
    generate(root)
    assert check(root) == []
    python = "generated/voxwire/ovp/machines.py"
    typescript = "generated/typescript/src/ovp/machines.ts"
    for path, before, after in (
        (
            python,
            "GatewayInput.END_DELIVERED: Transition(GatewayState.OVER)",
            "GatewayInput.END_DELIVERED: Transition(GatewayState.END_UNDELIVERED)",
        ),
        (
            typescript,
            'end_delivered: { target: "over", actions: [] }',
            'end_delivered: { target: "end_undelivered", actions: [] }',
        ),
    ):
        assert before in (ROOT / path).read_text(encoding="utf-8")
        text = (root / path).read_text(encoding="utf-8")
        assert after in text and before not in text
    (root / "runtime").symlink_to(ROOT / "runtime")
    script = (
        "import os, sys\n"
        "sys.path[:] = [p for p in sys.path if p not in sys.argv[1:]]  # the checkout's own\n"
        "import voxwire.ovp.machines as m\n"
        "assert m.__file__.startswith(os.getcwd()), m.__file__\n"
        "from voxwire.conformance import main\n"
        "sys.exit(main(['--kind', 'session', '--protocol', 'ovp']))\n"
    )
    environment = {
        **os.environ,
        "PYTHONPATH": f"{root / 'generated'}{os.pathsep}{root / 'runtime'}",
    }
    done = subprocess.run(
        [sys.executable, "-c", script, *(str(ROOT / d) for d in ("", "generated", "runtime"))],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL ")]
    refusal = '{"verdict": "error", "code": "OVP_RESUME_EXPIRED", "close": 1008}'
    assert failed == [
        f"FAIL ovp/session/gateway/{name}: step {step}: expected {refusal}, got "
        '{"verdict": "done"}'
        for name, step in (
            ("resume-after-the-end", 5),
            ("end-while-dropped", 9),
            ("resume-after-the-end-on-a-half-open-link", 10),
        )
    ], done.stdout


def test_a_claim_the_core_does_not_take_fails_its_case(sessions: list[Case]) -> None:
    case = next(c for c in sessions if c.id == "ovp/session/client/hang-up")
    claims = [*case.data["covers"], "client dropped.hang_up"]
    wrong = Case(case.id, case.protocol, case.kind, {**case.data, "covers": claims}, case.where)
    report = run([wrong], lambda c: answer(request(c)), {})
    assert not report.ok
    problem = "it claims to cover client dropped.hang_up, which the testee did not take"
    assert f"FAIL {case.id}: {problem}" in report.lines()
    # A testee that does not say what it took is judged on its verdicts alone.
    quiet = run([wrong], lambda c: {k: v for k, v in answer(request(c)).items() if k != "taken"})
    assert quiet.ok


def test_covers_is_read_as_role_state_input(sessions: list[Case]) -> None:
    good = sessions[0].data
    for bad in (["client idle"], "client idle.connect", [3]):
        with pytest.raises(VectorError, match=r'covers is a list of "<role> <state>\.<input>"'):
            read_vectors(json.dumps({**good, "covers": bad}) + "\n", "x.jsonl")


def test_the_step_forms_a_case_may_take(sessions: list[Case]) -> None:
    good = sessions[0].data

    def read(step: dict[str, Any]) -> None:
        steps, verdicts = [*good["steps"], step], [*good["expect"]["steps"], {"verdict": "done"}]
        case = {**good, "steps": steps, "expect": {"steps": verdicts}}
        read_vectors(json.dumps(case) + "\n", "x.jsonl")

    for step in (
        {"t": 9.0, "call": "hang_up"},
        {"t": 9.0, "wait": True},
        {"t": 9.0, "next_seq": 0},
        {"t": 9.0, "link": "failed"},
    ):
        read(step)
    for step in ({"t": 9.0, "wait": 1}, {"t": 9.0, "next_seq": -1}, {"t": 9.0, "call": 3}):
        with pytest.raises(VectorError, match="neither a message, a link event, a call"):
            read(step)


def test_a_step_the_side_does_not_play_is_an_error_answer() -> None:
    steps = [{"t": 0.0, "link": "open"}, {"t": 0.1, "call": "hang_up"}]
    got = answer(
        {"id": "x", "protocol": "ovp", "kind": "session", "side": "gateway", "steps": steps}
    )
    assert got["error"] == "ValueError: the gateway plays no call 'hang_up'"
