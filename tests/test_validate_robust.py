"""`voxwire validate` on captures that once crashed it (issue 29), and at its bounds: every
input gets violations or a one-line refusal, never a traceback; exit 0 clean, 1 violations, 2
no capture (or a failure of voxwire's own, with a hint to report it)."""

from __future__ import annotations

import io
import json
import math
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from fuzz.captures import record_captures
from voxwire import validate
from voxwire.capture import MAX_LINE_BYTES, MAX_SECONDS, CaptureError, read_capture
from voxwire.cli import BUG_REPORT, main
from voxwire.ovp._session import SessionStateError
from voxwire.ovp.client_core import ClientCore
from voxwire.validate import Finding, Tally, Violation, check_capture

TOO_LONG = f"a line of more than {MAX_LINE_BYTES:,} bytes"


@pytest.fixture(scope="module")
def recorded() -> dict[tuple[str, str], list[str]]:
    """The demo's captures, from both sides of each call, as lines, by (protocol, recorder)."""
    found = {}
    for capture in record_captures():
        lines = capture.splitlines()
        header = json.loads(lines[0])
        found[(header["protocol"], header["recorded_by"])] = lines
    assert len(found) == 4
    return found


def _findings(lines: list[str] | bytes, protocol: str | None = None) -> list[Finding]:
    data = lines if isinstance(lines, bytes) else ("\n".join(lines) + "\n").encode()
    _, findings = check_capture(io.BytesIO(data), Tally(), protocol=protocol)
    return list(findings)


def _violations(lines: list[str] | bytes) -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.text) for f in _findings(lines) if isinstance(f, Violation)]


def _run(path: Path, capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, str, str]:
    status = main(["validate", str(path), *options])
    out, err = capsys.readouterr()
    return status, out, err


def _inserted(lines: list[str], at: int, *rows: Any) -> list[str]:
    added = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    return [*lines[:at], *added, *lines[at:]]


@pytest.mark.parametrize("protocol", ["brisvox", "ovp"])
def test_the_recorded_captures_are_clean(
    recorded: dict[tuple[str, str], list[str]], protocol: str
) -> None:
    for (named, _), lines in recorded.items():
        if named == protocol:
            assert _violations(lines) == []


def test_an_ovp_link_open_while_the_link_is_up_is_a_violation(
    recorded: dict[tuple[str, str], list[str]],
) -> None:
    """Was AssertionError: no transition for CONNECT in LIVE (the client core). A link that
    opens while the last one is up is a half-open link: the client is told its link dropped
    first (the session cases' decision), so the capture goes on being judged, with no
    traceback and no violation at that line."""
    lines = recorded[("ovp", "client")]
    found = _violations(_inserted(lines, 4, {"t": 0.5, "link": "open"}))
    assert all(line != 5 for line, _, _ in found), found


def test_the_ovp_client_core_refuses_a_second_connection_in_its_words() -> None:
    core = ClientCore("ovps_1", epoch=0.0)
    core.connected(0.0)
    with pytest.raises(
        SessionStateError, match="ovp client: 'connect' cannot happen in state 'starting'"
    ):
        core.connected(1.0)


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "a capture line is not one flat JSON object"),
        ('{"t":0.1,"from":"server","text":' + "[" * 100_000, "not one flat JSON object"),
        ('{"t":0.1,"from":"server","text":"x","more":[]}', "not one flat JSON object"),
        ('{"t":NaN,"from":"server","text":"x"}', "t must be a number of seconds"),
        ('{"t":Infinity,"from":"server","text":"x"}', "t must be a number of seconds"),
        ('{"t":1e308,"from":"server","text":"x"}', "t must be a number of seconds"),
        ('{"t":1e400,"from":"server","text":"x"}', "not one flat JSON object"),
        ('{"t":0.1,"from":"server","binary":"\u00e9"}', "binary is not base64: it holds a non-"),
        ('{"t":0.1,"from":"server","binary":"\\ud800"}', "binary is not base64: it holds a non-"),
    ],
    ids=["deep", "deep-value", "nested-value", "nan", "inf", "1e308", "1e400", "e-acute", "surr"],
)
def test_a_broken_line_is_a_capture_violation_at_its_line(
    recorded: dict[tuple[str, str], list[str]], row: str, problem: str
) -> None:
    for (protocol, recorder), lines in recorded.items():
        found = _violations(_inserted(lines[:6], 3, row))
        assert found[0][:2] == (4, "capture"), (protocol, recorder, found)
        assert problem in found[0][2]


def test_a_text_with_a_lone_surrogate_is_refused_by_the_codec(
    recorded: dict[tuple[str, str], list[str]],
) -> None:
    """Was UnicodeEncodeError (validate's type peek, the agent core's refusal echo)."""
    for (protocol, recorder), lines in recorded.items():
        for text in ("\\ud800", '{\\"type\\":\\"\\ud800\\"}'):
            row = '{"t":0.01,"from":"server","text":"' + text + '"}'
            found = _violations(_inserted(lines[:6], 3, row))
            assert found[0][0] == 4 and "lone surrogate" in found[0][2], (protocol, recorder)


def test_t_is_read_up_to_its_bound_and_no_further(
    recorded: dict[tuple[str, str], list[str]],
) -> None:
    lines = recorded[("brisvox", "agent")][:4]
    last = json.loads(lines[-1])
    for t, refused in ((MAX_SECONDS, False), (math.nextafter(MAX_SECONDS, math.inf), True)):
        found = _violations([*lines[:-1], json.dumps({**last, "t": t})])
        assert [code for _, code, _ in found] == (["capture"] if refused else []), found


def test_an_ovp_session_that_starts_at_the_end_of_time_is_judged(
    recorded: dict[tuple[str, str], list[str]],
) -> None:
    """Was ValueError: year 10000 is out of range (the gateway core stamping its events)."""
    for recorder in ("client", "server"):
        lines = recorded[("ovp", recorder)][:30]
        first = json.loads(lines[1])
        start = {**json.loads(first["text"]), "ts": "9999-12-31T23:59:59.999Z"}
        assert (
            _violations([lines[0], json.dumps({**first, "text": json.dumps(start)}), *lines[2:]])
            == []
        )


@pytest.mark.parametrize("extra", [0, 1], ids=["bound", "bound+1"])
def test_a_line_is_read_up_to_the_bound_and_skipped_past_it(extra: int) -> None:
    head, tail = b'{"t":0.1,"from":"server","text":"', b'"}'
    row = head + b"a" * (MAX_LINE_BYTES + extra - len(head) - len(tail)) + tail
    assert len(row) == MAX_LINE_BYTES + extra
    data = b'{"capture":"voxwire","version":2,"protocol":"ovp","recorded_by":"client"}\n'
    for ending in (b"\n", b"\r\n", b""):
        found = _violations(data + row + ending)
        too_long = [text for _, _, text in found if text.startswith(TOO_LONG)]
        assert len(too_long) == extra, found
        if not extra:  # read, and refused as a message over the protocol's bound
            assert found[0][:2] == (2, "OVP_EVENT_SCHEMA_INVALID") and "at most" in found[0][2]


@pytest.mark.parametrize("kind", ["bytes", "str"])
def test_a_huge_line_is_skipped_in_bounded_memory(kind: str) -> None:
    data = (
        b'{"capture":"voxwire","version":2,"protocol":"ovp","recorded_by":"client"}\n'
        + b'{"t":0.1,"from":"server","text":"'
        + b"a" * (20 * MAX_LINE_BYTES)
        + b'"}\n{"t":0.2,"from":"server","text":"x"}\n'
    )
    stream: Any = io.BytesIO(data) if kind == "bytes" else io.StringIO(data.decode())
    tracemalloc.start()
    try:
        _, items = read_capture(stream)
        got = [
            (i.line, i.problem) if isinstance(i, CaptureError) else (i.line, "ok") for i in items
        ]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == [(2, got[0][1]), (3, "ok")] and got[0][1].startswith(TOO_LONG)
    assert peak < 6 * MAX_LINE_BYTES  # not the line's 20 bound (the str reads up to 4 per char)


def test_a_line_that_is_not_utf8_is_a_violation_not_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], recorded: dict[tuple[str, str], list[str]]
) -> None:
    lines = [line.encode() for line in recorded[("ovp", "client")][:5]]
    lines.insert(2, b'{"t":0.1,"from":"server","text":"\xff"}')
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    status, out, err = _run(path, capsys)
    assert (status, err) == (1, "")
    assert (
        f"{path}:3: capture: not UTF-8 text (invalid start byte: byte 34 of the line)"
        in out.splitlines()
    )


@pytest.mark.parametrize(
    ("protocol", "code"), [("brisvox", "bad_message"), ("ovp", "OVP_EVENT_SCHEMA_INVALID")]
)
def test_a_capture_of_junk_and_no_session_start_has_violations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], protocol: str, code: str
) -> None:
    """Was exit 0 and "0 violations" for OVP."""
    header = {"capture": "voxwire", "version": 2, "protocol": protocol, "recorded_by": "server"}
    rows = [header] + [{"t": 0.1, "from": "server", "text": text} for text in ("hello", "[1,2]")]
    path = tmp_path / "junk.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    status, out, err = _run(path, capsys)
    assert (status, err) == (1, "")
    assert out.startswith(f"{path}:2: {code}: ")
    path.write_text(json.dumps(header) + "\n")  # nothing but the header: no session at all
    status, out, err = _run(path, capsys)
    assert (status, err) == (1, "")
    assert out.splitlines() == [
        f"{path}:1: {code}: no session.start: no session",
        f"{path}: 0 messages, 0 frames, 1 violation",
    ]


def test_a_failure_of_voxwires_own_is_exit_2_in_one_line_with_a_hint(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    recorded: dict[tuple[str, str], list[str]],
) -> None:
    def broken(self: object, judgement: validate.Judgement) -> list[Finding]:
        if judgement.line == 4:
            raise KeyError("seq")
        return []

    monkeypatch.setattr(validate._Findings, "of", broken)
    path = tmp_path / "call.jsonl"
    path.write_text("\n".join(recorded[("brisvox", "server")]) + "\n")
    status, out, err = _run(path, capsys)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith(f"voxwire validate: {path}: voxwire failed at line 4 (KeyError at ")
    assert err.endswith(f"'seq'); {BUG_REPORT}\n")


def test_the_file_name_and_explanations_are_printed_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "two\nlines.jsonl"
    header = {"capture": "voxwire", "version": 2, "protocol": "ovp", "recorded_by": "client"}
    path.write_text(json.dumps(header) + '\n{"t":0.1,"from":"line\\nbreak","text":"x"}\n')
    status, out, _ = _run(path, capsys)
    assert status == 1
    shown = str(path).replace("\n", "\\n")
    assert out.splitlines() == [
        f"{shown}:2: capture: from must be one of ('server', 'client'), not 'line\\nbreak'",
        f"{shown}: 0 messages, 0 frames, 1 violation",
    ]
