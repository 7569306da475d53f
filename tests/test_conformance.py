"""The conformance vectors and their runner (docs/conformance.md).

voxwire passes every vector in process and as a subprocess testee; the vectors cover every message
type, every error code decoding can produce and every limit's boundary pair; a broken testee is
reported case by case; the expected-failures list fails the run both ways; and the vectors are
checked against the exported JSON Schema, every disagreement listed with its reason.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from codegen.ir import Field, Protocol
from codegen.jsonschema_export import NOT_EXPRESSIBLE, export_schema
from tests.conftest import ROOT
from voxwire import conformance
from voxwire.conformance import Case, answer, load_cases, request, run, serve

EXPECTED_FAILURES = ROOT / "runtime" / "voxwire" / "conformance" / "expected_failures.txt"
BROKEN_PEER = ROOT / "tests" / "peers" / "conformance_broken.py"


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return load_cases()


def _expected_failures() -> dict[str, str]:
    return conformance.load_expected_failures(
        EXPECTED_FAILURES.read_text(encoding="utf-8"), str(EXPECTED_FAILURES)
    )


def _runner(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "voxwire.conformance", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _codes(expect: dict[str, Any]) -> Iterator[str]:
    if "any_of" in expect:
        for option in expect["any_of"]:
            yield from _codes(option)
    elif expect.get("valid") is False:
        yield expect["code"]


# -- voxwire passes ------------------------------------------------------------------------------


def test_voxwire_passes_every_vector_in_process(cases: list[Case]) -> None:
    report = run(cases, lambda case: answer(request(case)), _expected_failures())
    assert report.ok, "\n".join(report.lines())
    assert {(c.protocol, c.kind) for c in cases} == {
        ("brisvox", "decode"),
        ("ovp", "decode"),
        ("ovp", "frame"),
        ("ovp", "session"),
        ("brisvox", "session"),
    }


def test_the_runner_against_voxwire_as_a_subprocess_testee() -> None:
    serve_command = f"{shlex.quote(sys.executable)} -m voxwire.conformance --serve"
    done = _runner("--testee", serve_command, "--expected-failures", str(EXPECTED_FAILURES))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "brisvox decode:" in done.stdout and "ovp frame:" in done.stdout
    assert "OK:" in done.stdout and "Traceback" not in done.stderr


def test_the_command_runs_the_packaged_vectors_with_its_own_list() -> None:
    done = _runner()
    assert done.returncode == 0, done.stdout[-3000:]
    summary = [line for line in done.stdout.splitlines() if line.startswith(("brisvox", "ovp"))]
    groups = {(c.protocol, c.kind) for c in load_cases()}
    assert len(summary) == len(groups) and all("0 failed" in line for line in summary)


# -- coverage: the Done-when of issue 4 ----------------------------------------------------------


def _header(protocol: str) -> dict[str, Any]:
    path = ROOT / "generated" / "voxwire" / protocol / "vectors.jsonl"
    with path.open(encoding="utf-8") as lines:
        header: dict[str, Any] = json.loads(next(lines))
    return header


def test_a_generated_file_starts_with_its_header(protocols: dict[str, Protocol]) -> None:
    for protocol in protocols.values():
        header = _header(protocol.id)
        assert "id" not in header
        assert header["generated_by"] == "codegen/vectors.py"
        assert (header["spec"], header["sha256"]) == (protocol.spec_file, protocol.spec_sha256)
        path = ROOT / "generated" / "voxwire" / protocol.id / "vectors.jsonl"
        assert header["cases"] == len(path.read_text(encoding="utf-8").splitlines()) - 1


def test_every_message_type_has_a_valid_vector_from_each_sender(
    protocols: dict[str, Protocol], cases: list[Case]
) -> None:
    valid = {
        (c.protocol, c.data.get("sender"), c.expect.get("type"))
        for c in cases
        if c.expect.get("valid") is True and not c.expect.get("unknown")
    }
    missing = [
        (p.id, sender, m.type)
        for p in protocols.values()
        for m in p.messages
        for sender in m.senders
        if (p.id, sender, m.type) not in valid
    ]
    assert missing == []


def test_every_error_code_decoding_can_produce_is_expected(
    protocols: dict[str, Protocol], cases: list[Case]
) -> None:
    for p in protocols.values():
        possible = set(p.decode_errors.values()) | {fr.error for fr in p.frames}
        owners = [*p.messages, *p.structs]
        possible |= {f.code for o in owners for f in o.fields if f.code}
        possible |= {r.code for o in owners for r in o.rules if r.code}
        expected = {code for c in cases if c.protocol == p.id for code in _codes(c.expect)}
        assert possible - expected == set(), p.id
        assert expected <= {e.code for e in p.errors}, p.id


def test_every_decode_failure_class_is_exercised(
    protocols: dict[str, Protocol], cases: list[Case]
) -> None:
    for p in protocols.values():
        reachable = set(p.decode_errors) - {"unknown_field", "too_many"}
        if any(s.reject_unknown_fields for s in p.structs):
            reachable.add("unknown_field")
        owners = [*p.messages, *p.structs]
        if any(f.max_length and f.type.kind == "array" for o in owners for f in o.fields):
            reachable.add("too_many")
        sources = " ".join(c.data["source"] for c in cases if c.protocol == p.id)
        assert {k for k in reachable if f"decode_errors.{k}" not in sources} == set(), p.id


def _field_checks(f: Field) -> list[str]:
    """The limits of one field, read from the IR (what limit_phrases prints)."""
    if f.has_const:
        return ["const"]
    checks = []
    if f.type.kind in ("array", "map"):
        checks += [c for c, b in (("max_length", f.max_length), ("min_length", f.min_length)) if b]
        if f.unique_by:
            checks.append("unique_by")
    element = f.type.element
    if element.kind in ("integer", "number"):
        checks += [c for c, b in (("minimum", f.minimum), ("maximum", f.maximum)) if b]
    if element.kind == "string":
        checks += [c for c, b in (("min_bytes", f.min_bytes), ("max_bytes", f.max_bytes)) if b]
        if f.type.kind == "string":
            checks += [
                c for c, b in (("min_length", f.min_length), ("max_length", f.max_length)) if b
            ]
        checks += [c for c, b in (("pattern", f.pattern), ("not_blank", f.not_blank)) if b]
    if element.kind == "enum" and element.enum is not None and not element.enum.open:
        checks.append("enum")
    return checks


def test_every_limit_and_rule_has_its_boundary_pair(
    protocols: dict[str, Protocol], cases: list[Case]
) -> None:
    for p in protocols.values():
        seen: dict[tuple[Any, ...], set[bool]] = {}
        for c in cases:
            covers = c.data.get("covers")
            if c.protocol == p.id and covers and "valid" in c.expect:
                key = (covers["owner"], covers.get("field"), covers["check"], covers.get("rule"))
                seen.setdefault(key, set()).add(c.expect["valid"])
        skipped = {
            item
            for reason, items in _header(p.id)["skipped"].items()
            if reason.startswith("no boundary pair")
            for item in items
        }
        wanted = [("protocol", None, "max_message_bytes", None)]
        owners = [(m.type, m.fields, m.rules) for m in p.messages]
        owners += [(s.name, s.fields, s.rules) for s in p.structs]
        for owner, fields, rules in owners:
            wanted += [
                (owner, f.wire_name, check, None) for f in fields for check in _field_checks(f)
            ]
            wanted += [(owner, None, f"rule:{r.kind}", i) for i, r in enumerate(rules)]
        wanted += [
            (s.name, None, "unknown_field", None) for s in p.structs if s.reject_unknown_fields
        ]
        for fr in p.frames:
            wanted.append((fr.name, None, "size", None))
            for f in fr.header:
                for check, present in (("const", f.const), ("flags", f.flags), ("enum", f.enum)):
                    if present is not None and present != ():
                        wanted.append((fr.name, f.name, check, None))
        missing = []
        for key in wanted:
            owner, field, check, _ = key
            pair = {True, False} if check != "unknown_field" else {False}
            if not pair <= seen.get(key, set()) and f"{owner}.{field} {check}" not in skipped:
                missing.append(key)
        assert missing == [], p.id
        # What was skipped is few, and says why: only Brisvox's system prompt, whose bound
        # equals the message bound (decision system-prompt-limit-unreachable).
        assert skipped <= {
            "session.accept.system_prompt max_bytes",
            "context.update.system_prompt max_bytes",
        }


def test_the_vectors_files_follow_the_format(cases: list[Case]) -> None:
    assert len({c.id for c in cases}) == len(cases)
    for c in cases:
        assert c.id.startswith(f"{c.protocol}/{c.kind}/"), c.id
        if "/handwritten/" in c.id:
            source = c.data["source"]
            assert re.search(r"\.txt|\.md|decisions|RFC 8259|spec/", source), c.id


def test_hand_written_vectors_cover_what_the_spec_cannot(cases: list[Case]) -> None:
    tags = {tag for c in cases for tag in c.data.get("tags", [])}
    for wanted in ("duplicate-keys", "huge-numbers", "deep-nesting", "bom", "document-example"):
        assert wanted in tags
    assert len({t for t in tags if t.startswith("jsontestsuite:n_")}) >= 12
    assert any(
        c.id == "ovp/decode/handwritten/direction/judged-on-type-before-the-body" for c in cases
    )


# -- the runner --------------------------------------------------------------------------------


def _write_vectors(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _say_case(case_id: str, valid: bool = True) -> dict[str, Any]:
    if valid:
        text, expect = (
            '{"type":"say","text":"hi"}',
            {"valid": True, "type": "say", "value": {"type": "say", "text": "hi"}},
        )
    else:
        text, expect = '{"type":"say","text":" "}', {"valid": False, "code": "invalid_argument"}
    return {
        "id": case_id,
        "protocol": "brisvox",
        "kind": "decode",
        "sender": "agent",
        "input": {"text": text},
        "expect": expect,
        "source": "tests/test_conformance.py",
    }


def test_a_broken_testee_is_reported_case_by_case(tmp_path: Path) -> None:
    rows = [
        _say_case("brisvox/decode/peer/fine"),
        _say_case("brisvox/decode/peer/wrong-code", valid=False),
        _say_case("brisvox/decode/peer/wrong-value"),
        _say_case("brisvox/decode/peer/garbage"),
        _say_case("brisvox/decode/peer/hang"),
        _say_case("brisvox/decode/peer/out-of-turn"),
        _say_case("brisvox/decode/peer/crash"),
        _say_case("brisvox/decode/peer/after-the-crash", valid=False),
    ]
    vectors = _write_vectors(tmp_path / "v.jsonl", rows)
    testee = f"{shlex.quote(sys.executable)} {shlex.quote(str(BROKEN_PEER))}"
    done = _runner(
        "--vectors", str(vectors), "--testee", testee, "--timeout", "2", "--startup-timeout", "90"
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "Traceback" not in out + done.stderr
    fails = {
        line.split()[1].rstrip(":"): line for line in out.splitlines() if line.startswith("FAIL ")
    }
    assert set(fails) == {
        f"brisvox/decode/peer/{n}"
        for n in ("wrong-code", "wrong-value", "garbage", "out-of-turn", "hang", "crash")
    }, out
    assert "another error code" in fails["brisvox/decode/peer/wrong-code"]
    assert "another value" in fails["brisvox/decode/peer/wrong-value"]
    assert "answered garbage" in fails["brisvox/decode/peer/garbage"]
    assert "for id 'some/other/id'" in fails["brisvox/decode/peer/out-of-turn"]
    assert "no answer within 2 s" in fails["brisvox/decode/peer/hang"]
    assert "exited with status 3" in fails["brisvox/decode/peer/crash"]
    assert "crashing on purpose" in fails["brisvox/decode/peer/crash"]  # the end of its stderr
    assert "brisvox decode: 8 cases, 2 passed, 6 failed" in out


def test_a_testee_that_keeps_dying_stops_the_run(tmp_path: Path) -> None:
    rows = [_say_case(f"brisvox/decode/peer/{i}") for i in range(8)]
    vectors = _write_vectors(tmp_path / "v.jsonl", rows)
    testee = f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(4)'"
    done = _runner("--vectors", str(vectors), "--testee", testee, timeout=120)
    assert done.returncode == 1
    fails = [line for line in done.stdout.splitlines() if line.startswith("FAIL ")]
    assert sum("exited with status 4" in line for line in fails) == 5
    assert sum("not run: the testee failed 5 cases in a row" in line for line in fails) == 3


def test_a_testee_that_cannot_start_is_a_usage_error(tmp_path: Path) -> None:
    vectors = _write_vectors(tmp_path / "v.jsonl", [_say_case("brisvox/decode/peer/x")])
    done = _runner("--vectors", str(vectors), "--testee", str(tmp_path / "no-such-program"))
    assert done.returncode == 2
    assert "cannot start the testee" in done.stderr and "Traceback" not in done.stderr


def test_the_expected_failures_list_works_both_ways(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    passing = _say_case("brisvox/decode/list/passes")
    failing = {
        **_say_case("brisvox/decode/list/fails"),
        "expect": {"valid": False, "code": "bad_message"},
    }
    vectors = str(_write_vectors(tmp_path / "v.jsonl", [passing, failing]))

    def main_with(listed: str) -> tuple[int, str]:
        path = tmp_path / "expected.txt"
        path.write_text(listed, encoding="utf-8")
        status = conformance.main(["--vectors", vectors, "--expected-failures", str(path)])
        return status, capsys.readouterr().out

    status, out = main_with("# a known bug\nbrisvox/decode/list/fails\n")
    assert status == 0 and "1 passed, 0 failed, 1 expected failures" in out
    status, out = main_with("")
    assert status == 1 and "FAIL brisvox/decode/list/fails: valid" in out
    status, out = main_with("brisvox/decode/list/fails\nbrisvox/decode/list/passes  # fixed?\n")
    assert status == 1 and "PASSED BUT LISTED brisvox/decode/list/passes (fixed?)" in out
    status, out = main_with("brisvox/decode/list/fails\nbrisvox/decode/list/gone\n")
    assert status == 1 and "UNKNOWN EXPECTED FAILURE brisvox/decode/list/gone" in out
    # A listed id that a filter leaves out is neither stale nor unknown.
    path = tmp_path / "expected.txt"
    path.write_text("brisvox/decode/list/fails\n", encoding="utf-8")
    status = conformance.main(
        ["--vectors", vectors, "--expected-failures", str(path), "--match", "passes"]
    )
    assert status == 0, capsys.readouterr().out


def test_expected_failure_notes_come_from_the_comment_above() -> None:
    listed = conformance.load_expected_failures(
        "# header\n\n# bug one,\n# continued\na/1\na/2  # own note\n# bug two\na/3\n", "x"
    )
    assert listed == {"a/1": "bug one, continued", "a/2": "own note", "a/3": "bug two"}
    assert all(note for note in _expected_failures().values())


def test_a_bad_vectors_file_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    path.write_text(json.dumps(_say_case("a/b")) + "\n{not json\n", encoding="utf-8")
    done = _runner("--vectors", str(path))
    assert done.returncode == 2 and f"{path}:2: not a JSON line" in done.stderr


def test_serve_answers_every_line_and_never_stops() -> None:
    good = request(load_cases()[0])
    stdin = io.BytesIO(b"not json\n[1]\n" + json.dumps(good).encode() + b"\n")
    stdout = io.BytesIO()
    assert serve(stdin, stdout) == 0
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert [("error" in a) for a in answers] == [True, True, False]
    assert answers[2]["id"] == good["id"] and answers[2]["valid"] is True


def test_answer_turns_anything_unexpected_into_an_error() -> None:
    assert "error" in answer({})
    assert "error" in answer({"id": "x", "protocol": "brisvox", "kind": "session"})
    bad_sender = {
        "id": "x",
        "protocol": "brisvox",
        "kind": "decode",
        "sender": "nobody",
        "input": {"text": "{}"},
    }
    assert "unknown sender" in answer(bad_sender)["error"]


def test_values_compare_as_json() -> None:
    assert conformance.json_equal({"a": [1, 2.5]}, {"a": [1.0, 2.5]})
    assert not conformance.json_equal(True, 1) and not conformance.json_equal(0, False)
    assert not conformance.json_equal({"a": 1}, {"a": 1, "b": None})
    assert (
        conformance.check(
            {"any_of": [{"valid": False, "code": "x"}]}, {"valid": False, "code": "x"}
        )
        is None
    )


# -- differential: voxwire's decode against the exported JSON Schema ---------------------------


def _entry(start: str) -> str:
    """The NOT_EXPRESSIBLE entry that begins with ``start`` (so the table cannot go stale)."""
    [entry] = [e for e in NOT_EXPRESSIBLE if e.startswith(start)]
    return f"JSON Schema cannot express {entry}"


DISAGREEMENTS = {
    # reason: (the ids it explains, what the schema says)
    _entry("limits in UTF-8 bytes"): (
        r"/(max|min)_bytes/(over|under)|/escape/max-line-bytes-over",
        True,
    ),
    _entry("uniqueness of one field"): (r"/unique_by/repeated$", True),
    _entry("integers written with a fraction"): (
        r"/wrong-type/float$|/number/(exponent-form-integer|seq-exponent-form)$",
        True,
    ),
    _entry("the largest message"): (
        r"/max-message-bytes/.*/over|/escape/max-message-bytes-counts-escapes$",
        True,
    ),
    _entry("the calendar of a date-time"): (r"/ts/30-february-refused$", True),
    "the schema has no keyword for depth: the spec's max_nesting_depth": (
        r"/nesting/129-deep",
        True,
    ),
    "the schema judges a parsed object: Python's json keeps the last of repeated keys": (
        r"/duplicate-key/(each-occurrence|type-repeated-different)",
        True,
    ),
    "the schema judges a parsed object: Python's json reads a lone surrogate escape": (
        r"/malformed/\w+/(lone|reversed)-|/lone-surrogate",
        True,
    ),
    "Python's re (the jsonschema library's pattern) lets $ match before a final newline": (
        r"/pattern/trailing-newline$",
        True,
    ),
}


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def test_decode_agrees_with_the_json_schema_except_where_listed(
    protocols: dict[str, Protocol], cases: list[Case]
) -> None:
    validators = {}
    for p in protocols.values():
        document = export_schema(p)
        for s in p.senders:
            judge = f"Any{s.union_name}" if s.accepts_unknown else s.union_name
            schema = {"$ref": f"#/$defs/{judge}", "$defs": document["$defs"]}
            validators[(p.id, s.id)] = jsonschema.Draft202012Validator(schema)
    found: dict[str, list[str]] = {}
    for c in cases:
        if c.kind != "decode" or "text" not in c.data["input"] or "any_of" in c.expect:
            continue
        try:
            obj = json.loads(c.data["input"]["text"], parse_constant=_not_json)
        except (ValueError, RecursionError):
            continue  # not JSON (NaN included), or deeper than Python's json reads: no judging
        if not isinstance(obj, dict):
            continue
        schema_says = validators[(c.protocol, c.data["sender"])].is_valid(obj)
        if schema_says == c.expect["valid"]:
            continue
        reasons = [
            reason
            for reason, (pattern, verdict) in DISAGREEMENTS.items()
            if verdict == schema_says and re.search(pattern, c.id)
        ]
        assert len(reasons) == 1, f"{c.id}: schema says {schema_says}, reasons {reasons}"
        found.setdefault(reasons[0], []).append(c.id)
    assert set(found) == set(DISAGREEMENTS), "a listed disagreement no longer occurs"
