"""Session-level conformance vectors (docs/conformance.md, "Sessions"): voxwire's cores pass them
all, in process and as a subprocess testee; a testee that judges a step wrongly fails that case;
the timed cases follow the spec's constants."""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
from typing import Any

import pytest

from codegen.loader import load
from codegen.resolver import resolve
from codegen.sessions import build_sessions
from tests.conftest import ROOT
from voxwire.conformance import Case, VectorError, answer, load_cases, read_vectors, request, run

SCENARIOS = {
    "ovp/session/gateway/handshake",
    "ovp/session/gateway/seq-regression-equal",
    "ovp/session/gateway/direction-violation",
    "ovp/session/gateway/resume-inside-the-window",
    "ovp/session/gateway/resume-at-the-window",
    "ovp/session/gateway/resume-outside-the-window",
    "ovp/session/gateway/replay-from-the-start",
    "ovp/session/gateway/replay-beyond-what-was-sent",
    "ovp/session/gateway/resume-after-the-end",
    "ovp/session/client/handshake",
    "ovp/session/client/resume-and-replay",
    "brisvox/session/agent/handshake",
    "brisvox/session/agent/no-common-version",
    "brisvox/session/agent/undecodable-tool-call",
    "brisvox/session/engine/handshake",
    "brisvox/session/engine/version-not-offered",
    "brisvox/session/engine/resume",
    "brisvox/session/engine/resume-without-resume-true",
}
"""The rules issue 16 names, one case each at least."""


@pytest.fixture(scope="module")
def sessions() -> list[Case]:
    return [c for c in load_cases() if c.kind == "session"]


def test_every_named_scenario_has_a_case(sessions: list[Case]) -> None:
    assert {c.id for c in sessions} >= SCENARIOS


def test_voxwire_passes_every_session_case_in_process(sessions: list[Case]) -> None:
    report = run(sessions, lambda case: answer(request(case)), {})
    assert report.ok, "\n".join(report.lines())
    assert len(sessions) >= len(SCENARIOS)


def test_voxwire_passes_them_as_a_subprocess_testee() -> None:
    serve = f"{shlex.quote(sys.executable)} -m voxwire.conformance --serve"
    done = subprocess.run(
        [sys.executable, "-m", "voxwire.conformance", "--kind", "session", "--testee", serve],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "0 unexpected" in done.stdout


def test_a_wrong_verdict_fails_its_case_at_its_step(sessions: list[Case]) -> None:
    case = next(c for c in sessions if c.id == "ovp/session/gateway/seq-regression-equal")

    def lenient(c: Case) -> dict[str, Any]:
        got = answer(request(c))
        if c.id == case.id:  # a testee that takes the repeated seq
            got["steps"] = [
                {"verdict": "accepted"} if v.get("verdict") == "error" else v for v in got["steps"]
            ]
        return got

    report = run(sessions, lenient, {})
    assert not report.ok
    text = "\n".join(report.lines())
    assert f"FAIL {case.id}: step 3: expected" in text


def test_the_window_cases_take_their_times_from_the_spec() -> None:
    spec = resolve(load(ROOT / "spec" / "ovp.yaml"))
    window = next(c.value for c in spec.constants if c.name == "resume_window_ms") / 1000
    cases = {c["id"]: c for c in build_sessions(spec)}
    for name, after in (("at", window), ("inside", window - 0.001), ("outside", window + 0.001)):
        steps = cases[f"ovp/session/gateway/resume-{name}-the-window"]["steps"]
        lost = next(s["t"] for s in steps if s.get("link") == "lost")
        resume = next(s["t"] for s in steps if '"session.resume"' in s.get("text", ""))
        assert resume - lost == pytest.approx(after)


def test_a_session_case_needs_one_verdict_per_step() -> None:
    good = next(c for c in load_cases() if c.kind == "session").data
    broken = {**good, "expect": {"steps": good["expect"]["steps"][:-1]}}
    with pytest.raises(VectorError, match="one verdict per step"):
        read_vectors(json.dumps(broken) + "\n", "x.jsonl")
    with pytest.raises(VectorError, match="side"):
        read_vectors(json.dumps({**good, "side": None}) + "\n", "x.jsonl")
    backwards = [{**good["steps"][0], "t": 5.0}, *good["steps"][1:]]
    with pytest.raises(VectorError, match=r"step 1 has no time `t` at or after 5\.0"):
        read_vectors(json.dumps({**good, "steps": backwards}) + "\n", "x.jsonl")
    odd = [{"t": 0.0, "link": "sideways"}, *good["steps"][1:]]
    with pytest.raises(VectorError, match="step 0 is neither a message, a link event, a call"):
        read_vectors(json.dumps({**good, "steps": odd}) + "\n", "x.jsonl")


def test_a_side_voxwire_does_not_play_is_an_error_answer() -> None:
    got = answer({"id": "x", "protocol": "ovp", "kind": "session", "side": "operator", "steps": []})
    assert "voxwire plays no ovp side 'operator'" in got["error"]


def test_serve_answers_a_session_request_in_one_line() -> None:
    case = next(c for c in load_cases() if c.kind == "session")
    stdout = io.BytesIO()
    from voxwire.conformance import serve

    assert serve(io.BytesIO((json.dumps(request(case)) + "\n").encode()), stdout) == 0
    (line,) = stdout.getvalue().splitlines()
    assert json.loads(line)["steps"] == case.expect["steps"]
