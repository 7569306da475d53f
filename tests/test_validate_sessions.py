"""`voxwire validate` on every generated session case as a capture (link events included): the
side under test's core, as validate drives it, gives each step the case's verdict, and every
broken rule is a violation at its line with the verdict's code."""

from __future__ import annotations

import io
import json

import pytest

from voxwire.capture import LINK_EVENTS, CaptureWriter, read_capture
from voxwire.conformance import Case, load_cases
from voxwire.validate import SIDE_OF, Judgement, Tally, Violation, check_capture, replay


@pytest.fixture(scope="module")
def sessions() -> list[Case]:
    """The cases a capture can hold: it records a session from the server's first message on,
    and what crossed its links, never the application's calls, a wait, a seq skipped or a
    connection that never opened."""
    return [c for c in load_cases() if c.kind == "session" and _capturable(c)]


def _capturable(case: Case) -> bool:
    """A capture shows each message as its receiver read it: not a session.end the client never
    read, one whose link dropped (or was half-open) before the client answered the close."""
    steps = case.data["steps"]
    opening = steps[0].get("from") == "server"
    wire = all("from" in s or s.get("link") in LINK_EVENTS for s in steps)
    end = next((i for i, s in enumerate(steps) if _type(s) == "session.end"), len(steps))
    after = next((s["link"] for s in steps[end:] if "link" in s), "closed")
    return opening and wire and after == "closed"


def _as_capture(case: Case) -> str:
    """The case's steps as a version 2 capture, recorded by the side under test."""
    side = case.data["side"]
    recorded_by = next(s for s, name in SIDE_OF[case.protocol].items() if name == side)
    header = {"capture": "voxwire", "version": 2, "protocol": case.protocol}
    lines = [json.dumps({**header, "recorded_by": recorded_by})]
    lines += [json.dumps(step) for step in case.data["steps"]]
    return "\n".join(lines) + "\n"


def _type(step: dict[str, object]) -> object:
    """The wire type of a step's text, if it is a JSON object."""
    try:
        message = json.loads(str(step.get("text")))
    except ValueError:
        return None
    return message.get("type") if isinstance(message, dict) else None


def _judgements(capture: str) -> list[Judgement]:
    _, items = replay(io.StringIO(capture))
    judgements = [j for j in items if isinstance(j, Judgement)]
    return judgements


def test_every_case_gets_its_verdicts_from_validate(sessions: list[Case]) -> None:
    assert len(sessions) == 52
    for case in sessions:
        judgements = _judgements(_as_capture(case))
        assert [j.line for j in judgements] == list(range(2, len(case.data["steps"]) + 2))
        side = case.data["side"]
        got = [j.sides[side].verdict if side in j.sides else None for j in judgements]
        assert got == case.expect["steps"], case.id


def test_every_error_verdict_is_a_violation_with_its_code(sessions: list[Case]) -> None:
    """A line has one violation, the sender's refusal first: where the peer's core would not
    have taken the step (a gateway that lost the session, a refusal only its own rules make),
    the peer's code may stand at that line."""
    for case in sessions:
        capture = _as_capture(case)
        _, findings = check_capture(io.StringIO(capture), Tally())
        found = {f.line - 2: f.code for f in findings if isinstance(f, Violation) and f.line > 1}
        side = case.data["side"]
        peers = [
            next((j.code for s, j in judged.sides.items() if s != side and j.code), None)
            for judged in _judgements(capture)
        ]
        errors = {
            i: v["code"] for i, v in enumerate(case.expect["steps"]) if v["verdict"] == "error"
        }
        for i, code in errors.items():
            assert found.get(i) in (code, peers[i] or code), (case.id, i, found)
        for i in set(found) - set(errors):  # what else broke a rule: the peer's doing, or the
            # side's own (a step it would not take: a reconnect after its end)
            verdict = case.expect["steps"][i]["verdict"]
            assert peers[i] or verdict in ("ignored", "close", "sent", "refused"), (case.id, i)


def test_a_case_without_session_start_is_a_violation(sessions: list[Case]) -> None:
    """A capture holds a whole session, from its session.start; a case may begin later. Where
    nothing else broke a rule, the missing start is a violation at line 1."""
    for case in sessions:
        _, findings = check_capture(io.StringIO(_as_capture(case)), Tally())
        violations = [f for f in findings if isinstance(f, Violation)]
        at_header = [f.text for f in violations if f.line == 1]
        others = [f for f in violations if f.line > 1]
        started = any(_type(s) == "session.start" for s in case.data["steps"])
        expected = [] if started or others else ["no session.start: no session"]
        assert at_header == expected, case.id


def test_a_capture_writes_and_reads_link_events(tmp_path: pytest.TempPathFactory) -> None:
    path = f"{tmp_path}/links.jsonl"
    with CaptureWriter(path, protocol="ovp", recorded_by="client") as capture:
        capture.link("lost")
        capture.link("open")
        with pytest.raises(ValueError, match="a link event is one of"):
            capture.link("sideways")
    with open(path, encoding="utf-8") as lines:
        header, items = read_capture(lines)
        assert header.version == 2
        assert [getattr(i, "event", None) for i in items] == ["lost", "open"]
