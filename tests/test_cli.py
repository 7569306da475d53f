"""The voxwire command, run as users run it: a subprocess, its output and its exit status."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from voxwire import ovp
from voxwire.capture import CaptureError, CaptureWriter, Frame, read_capture


def voxwire(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "voxwire", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_version_names_package_and_both_specs() -> None:
    done = voxwire("version")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("voxwire ")
    assert any(line.startswith("brisvox: Brisvox agent protocol") for line in lines)
    assert any(line.startswith("ovp: Orbit Voice Protocol 1.0") for line in lines)


def test_schema_of_one_message_is_a_standalone_valid_schema() -> None:
    done = voxwire("schema", "--protocol", "ovp", "--message", "transcript.final")
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert set(schema["$defs"]) == {"TranscriptFinal", "Word", "Speaker"}
    validator = jsonschema.Draft202012Validator(schema)
    event = {"type": "transcript.final", "seq": 4, "ts": "2026-05-14T12:34:56Z", "session_id": "s",
             "utterance_id": "u1", "speaker": "caller", "language": "en-US", "text": "Hi", "confidence": 0.9, "words": []}  # fmt: skip
    assert validator.is_valid(event)
    ovp.decode(json.dumps(event), sender="server")  # voxwire agrees
    assert not validator.is_valid({**event, "type": "transcript.partial"})
    assert not validator.is_valid({key: value for key, value in event.items() if key != "words"})


def test_schema_of_a_protocol_has_every_message() -> None:
    done = voxwire("schema", "--protocol", "brisvox")
    assert done.returncode == 0
    assert {"ServerMessage", "AgentMessage", "SessionStart", "Say"} <= set(
        json.loads(done.stdout)["$defs"]
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("schema", "--protocol", "ovp", "--message", "nope"), "ovp has no message type 'nope'"),
        (("schema", "--protocol", "sip"), "invalid choice: 'sip'"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        ((), "the following arguments are required: COMMAND"),
    ],
)
def test_bad_arguments_are_one_clear_line(args: tuple[str, ...], message: str) -> None:
    done = voxwire(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_capture_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "call.jsonl"
    with CaptureWriter(path, protocol="ovp", recorded_by="client") as capture:
        capture.record("server", '{"type":"session.start"}')
        capture.record("client", b"\x01\x00\x00\x00")
    with path.open(encoding="utf-8") as lines:
        header, frames = read_capture(lines)
        got = list(frames)
    assert (header.protocol, header.recorded_by) == ("ovp", "client")
    assert [(f.line, f.sender, f.data) for f in got if isinstance(f, Frame)] == [
        (2, "server", '{"type":"session.start"}'),
        (3, "client", b"\x01\x00\x00\x00"),
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "line 1: empty file"),
        ("[]\n", "line 1: not a voxwire capture"),
        (
            '{"capture":"voxwire","version":2,"protocol":"ovp","recorded_by":"client"}\n',
            "line 1: capture version 2",
        ),
        (
            '{"capture":"voxwire","version":1,"protocol":"sip","recorded_by":"client"}\n',
            "line 1: unknown protocol 'sip'",
        ),
        (
            '{"capture":"voxwire","version":1,"protocol":"ovp","recorded_by":"agent"}\n',
            "line 1: recorded_by must be one of",
        ),
    ],
)
def test_a_bad_capture_header_names_its_problem(text: str, problem: str) -> None:
    with pytest.raises(CaptureError, match=problem):
        read_capture(io.StringIO(text))


def test_bad_capture_lines_are_reported_and_reading_goes_on() -> None:
    text = "\n".join([
        '{"capture":"voxwire","version":1,"protocol":"brisvox","recorded_by":"agent"}',
        '{"t":0.1,"from":"server","text":"{}"}',
        "not json",
        '{"t":-1,"from":"server","text":"{}"}',
        '{"t":0.2,"from":"client","text":"{}"}',
        '{"t":0.3,"from":"agent","text":"{}","binary":"AA=="}',
        '{"t":0.4,"from":"agent","binary":"***"}',
        '{"t":0.5,"from":"agent","text":"{}"}',
    ])  # fmt: skip
    _, frames = read_capture(io.StringIO(text))
    got = [(f.line, f.problem) if isinstance(f, CaptureError) else (f.line, "ok") for f in frames]
    assert [line for line, _ in got] == [2, 3, 4, 5, 6, 7, 8]
    assert got[0][1] == got[-1][1] == "ok"
    assert "not JSON" in got[1][1] and "t must be a number" in got[2][1]
    assert "from must be one of ('server', 'agent')" in got[3][1]
    assert "exactly one of text and binary" in got[4][1] and "not base64" in got[5][1]
