"""The voxwire command, run as users run it: a subprocess, its output and its exit status."""

from __future__ import annotations

import argparse
import asyncio
import base64
import fcntl
import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from voxwire import cli, ovp
from voxwire.capture import CaptureError, CaptureWriter, Frame, read_capture
from voxwire.cli import main
from voxwire.demo import brisvox_call, ovp_call
from voxwire.demo.timeline import Style, Timeline
from voxwire.validate import Tally, check_capture


def voxwire(
    *args: str, timeout: float = 60, columns: int | None = None
) -> subprocess.CompletedProcess[str]:
    # No terminal; COLUMNS only where a test sets it (pytest's own may leak into children).
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "voxwire", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
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
        ("[]\n", "line 1: the header is not one flat JSON object"),
        ('{"capture":"pcap"}\n', "line 1: not a voxwire capture"),
        (
            '{"capture":"voxwire","version":3,"protocol":"ovp","recorded_by":"client"}\n',
            "line 1: capture version 3",
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


# ----------------------------------------------------------------------------- voxwire demo

DEMO_STEPS = [
    "handshake and greeting", "a user turn", "read_only tool call", "side_effect tool call",
    "the agent adds a say", "barge-in", "end",
    "handshake: session.start", "simple Q&A", "tool call mid-conversation", "human handoff",
]  # fmt: skip
DEMO_MESSAGES = [
    "session.accept", "tool.call", "tool.result", "say", "turn.interrupted", "end",
    "command.result", "session.end", "transcript.final", "agent.tool.invoke", "agent.tool.result",
    "agent.handoff_requested", "agent.handoff_accepted", "supervisor.takeover", "audio.flush",
    "agent.handoff_completed",
]  # fmt: skip


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``voxwire demo --record DIR``, run once: its output and DIR."""
    folder = tmp_path_factory.mktemp("demo")
    return voxwire("demo", "--record", str(folder)), folder


def test_the_demo_plays_a_call_per_protocol_and_names_every_step(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, folder = demo
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no warning, no traceback
    out = done.stdout
    lines = out.splitlines()
    headings = [line for line in lines if line.startswith("── ")]
    assert len(headings) == len(DEMO_STEPS)
    for step, heading in zip(DEMO_STEPS, headings, strict=True):
        assert step in heading
    for kind in DEMO_MESSAGES:
        assert f" {kind} " in out, kind
    assert "greeting=\"Hi, Luigi's here." in out
    assert "… 25 audio frames up …" in out and "audio frames down" in out
    assert lines.count("summary") == 2
    assert len([line for line in lines if line.startswith("  handshake ")]) == 2
    assert re.search(r" ms  tool.call check_hours → tool.result\n", out)
    assert re.search(r" ms  agent.tool.invoke lookup_order → agent.tool.result\n", out)
    assert f"recorded             {folder / 'ovp.jsonl'}" in out
    assert "\x1b[" not in out  # not a terminal: no colour


def test_the_demo_plays_one_protocol_without_color_when_asked(tmp_path: Path) -> None:
    done = voxwire("demo", "--protocol", "brisvox", "--no-color")
    assert done.returncode == 0, done.stderr
    assert "brisvox: one call" in done.stdout and "ovp: one call" not in done.stdout


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("args", "environ", "colored"),
    [((), {}, True), (("--no-color",), {}, False), ((), {"NO_COLOR": "1"}, False)],
)
def test_the_demo_colours_a_terminal_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], environ: dict[str, str], colored: bool
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(["demo", "--protocol", "brisvox", *args]) == 0
    assert ("\x1b[" in terminal.getvalue()) is colored


def test_the_demo_says_in_one_line_when_it_cannot_record(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    done = voxwire("demo", "--protocol", "brisvox", "--record", str(blocker / "captures"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("voxwire demo: ")
    assert "Traceback" not in done.stderr


# ----------------------------------------------------------------------------- voxwire validate


@pytest.mark.parametrize("protocol", ["brisvox", "ovp"])
def test_validate_passes_the_demos_recordings(
    demo: tuple[subprocess.CompletedProcess[str], Path], protocol: str
) -> None:
    path = demo[1] / f"{protocol}.jsonl"
    done = voxwire("validate", str(path), "--protocol", protocol)
    assert done.returncode == 0, done.stdout
    # The OVP demo's periodic events (call.quality.update, agent.cost.tick) come once or twice,
    # as the call's real time decides: the summary is held to the lines the capture holds.
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    messages = sum("text" in line for line in lines)
    frames = sum("binary" in line for line in lines)
    assert messages >= (29 if protocol == "brisvox" else 33)
    assert frames == (0 if protocol == "brisvox" else 170)
    assert done.stdout.splitlines() == [
        f"{path}: {messages} messages, {frames} frames, 0 violations"
    ]


def test_the_agent_and_the_gateway_record_their_side_too(tmp_path: Path) -> None:
    """AgentServer(record=...) and Gateway(record=...), one file per call ({session_id})."""
    template = str(tmp_path / "{session_id}.jsonl")
    quiet = Style(color=False, unicode=False)

    async def play() -> None:
        await brisvox_call.play(
            Timeline("brisvox", out=io.StringIO(), style=quiet), record_agent=template
        )
        await ovp_call.play(
            Timeline("ovp", out=io.StringIO(), style=quiet), record_gateway=template
        )

    asyncio.run(play())
    for name, protocol, recorded_by in (
        ("call-0042", "brisvox", "agent"),
        ("ovps_demo_0042", "ovp", "server"),
    ):
        path = tmp_path / f"{name}.jsonl"
        assert json.loads(path.read_text().splitlines()[0])["recorded_by"] == recorded_by
        done = voxwire("validate", str(path), "--protocol", protocol)
        assert done.returncode == 0, done.stdout
        assert done.stdout.endswith(" 0 violations\n")


class Capture:
    """A recorded capture to break: its lines as JSON objects (or raw text), 0 the header."""

    def __init__(self, path: Path) -> None:
        self.lines: list[Any] = [json.loads(line) for line in path.read_text().splitlines()]

    def find(self, sender: str, kind: str, nth: int = 0) -> int:
        """The index of the ``nth`` message of type ``kind`` (``frame`` for binary) ``sender`` sent."""
        found = [
            index
            for index, line in enumerate(self.lines[1:], 1)
            if isinstance(line, dict)
            and line["from"] == sender
            and (
                ("binary" in line)
                if kind == "frame"
                else ("text" in line and json.loads(line["text"])["type"] == kind)
            )
        ]
        return found[nth]

    def message(self, index: int) -> dict[str, Any]:
        return dict(json.loads(self.lines[index]["text"]))

    def update(self, index: int, **fields: Any) -> None:
        self.lines[index]["text"] = json.dumps({**self.message(index), **fields})

    def frame(self, index: int) -> bytearray:
        return bytearray(base64.b64decode(self.lines[index]["binary"]))

    def set_frame(self, index: int, data: bytes) -> None:
        self.lines[index]["binary"] = base64.b64encode(data).decode()

    def insert(self, index: int, sender: str, message: dict[str, Any]) -> None:
        self.lines.insert(
            index, {"t": self.lines[index - 1]["t"], "from": sender, "text": json.dumps(message)}
        )

    def resume_brisvox(self, after: int, previous_seq: int | None = None) -> int:
        """Lose the link after line ``after`` and take the call up again (session.start with
        resume, the agent's accept with resume: true); return the start's index."""
        server = [i for i in range(1, after + 1) if self.lines[i]["from"] == "server"]
        last = self.message(server[-1])
        for i in range(after + 1, len(self.lines)):
            if self.lines[i]["from"] == "server":
                message = self.message(i)
                self.update(i, seq=message["seq"] + 2, t_ms=message["t_ms"] + 150)
        previous = last["seq"] if previous_seq is None else previous_seq
        resume = {"attempt": 1, "previous_seq": previous, "down_ms": 150}
        start = {**self.message(1), "seq": last["seq"] + 2, "t_ms": last["t_ms"] + 150}
        self.insert(after + 1, "server", {**start, "resume": resume})
        accept = {"type": "session.accept", "version": 1, "tools": [], "resume": True}
        self.insert(after + 2, "agent", accept)
        return after + 1

    def write(self, path: Path) -> Path:
        path.write_text(
            "".join(
                (line if isinstance(line, str) else json.dumps(line)) + "\n" for line in self.lines
            )
        )
        return path


def b_bad_json(c: Capture) -> tuple[int, str]:
    i = c.find("server", "user.text")
    c.lines[i] = '{"t": 0.1, "from": "server", "text": '
    return i, "capture"


def b_first_message(c: Capture) -> tuple[int, str]:
    del c.lines[1]  # session.start: the agent's accept comes first
    return 1, "bad_message"


def b_handshake_order(c: Capture) -> tuple[int, str]:
    c.lines[2], c.lines[3] = c.lines[3], c.lines[2]  # an event before the agent's accept
    return 2, "bad_message"


def b_direction(c: Capture) -> tuple[int, str]:
    i = c.find("agent", "tool.result")
    c.lines[i]["from"] = "server"
    return i, "unknown_type"


def b_seq_regression(c: Capture) -> tuple[int, str]:
    i = c.find("server", "user.text")
    c.update(i, seq=c.message(i)["seq"] - 1)
    return i, "bad_message"


def b_seq_gap(c: Capture) -> tuple[int, str]:
    i = c.find("server", "user.text")
    c.update(i, seq=c.message(i)["seq"] + 1)
    return i, "bad_message"


def b_t_ms_back(c: Capture) -> tuple[int, str]:
    i = c.find("server", "user.text")
    c.update(i, t_ms=3_600_000)
    return i + 1, "bad_message"


def b_resume_fields(c: Capture) -> tuple[int, str]:
    c.update(2, resume=True)
    i = c.find("agent", "tool.result")
    return c.resume_brisvox(i, previous_seq=c.message(i - 1)["seq"] - 2), "bad_message"


def b_agent_version(c: Capture) -> tuple[int, str]:
    c.update(2, version=0)
    return 2, "invalid_argument"


def b_binary(c: Capture) -> tuple[int, str]:
    c.lines.insert(4, {"t": 0.1, "from": "server", "binary": "AAAA"})
    return 4, "bad_message"


def b_oversized(c: Capture) -> tuple[int, str]:
    i = c.find("agent", "say")
    c.update(i, text="x" * 70_000)
    return i, "too_large"


def o_bad_json(c: Capture) -> tuple[int, str]:
    i = c.find("server", "transcript.final")
    c.lines[i] = "[1, 2"
    return i, "capture"


def o_first_message(c: Capture) -> tuple[int, str]:
    i = c.find("server", "audio.ingress")
    c.lines[1], c.lines[i] = c.lines[i], c.lines[1]
    return 1, "OVP_EVENT_SCHEMA_INVALID"


def o_direction(c: Capture) -> tuple[int, str]:
    i = c.find("client", "agent.handoff_accepted")
    c.lines[i]["from"] = "server"
    return i, "OVP_EVENT_DIRECTION_VIOLATION"


def o_server_seq_regression(c: Capture) -> tuple[int, str]:
    i = c.find("server", "transcript.final")
    c.update(i, seq=c.message(i)["seq"] - 1)
    return i, "OVP_SEQ_REGRESSION"


def o_client_seq_regression(c: Capture) -> tuple[int, str]:
    i = c.find("client", "supervisor.takeover")
    c.update(i, seq=0)
    return i, "OVP_SEQ_REGRESSION"


def o_session_id(c: Capture) -> tuple[int, str]:
    i = c.find("client", "supervisor.takeover")
    c.update(i, session_id="ovps_someone_else")
    return i, "OVP_EVENT_SCHEMA_INVALID"


def o_frame_header(c: Capture) -> tuple[int, str]:
    i = c.find("client", "frame", 3)
    frame = c.frame(i)
    frame[0] = 2  # version
    c.set_frame(i, frame)
    return i, "OVP_AUDIO_FRAME_INVALID"


def o_frame_size(c: Capture) -> tuple[int, str]:
    i = c.find("server", "frame", 3)
    c.set_frame(i, c.frame(i)[:600])
    return i, "OVP_AUDIO_FRAME_INVALID"


def o_frame_seq(c: Capture) -> tuple[int, str]:
    i = c.find("client", "frame", 3)
    frame = c.frame(i)
    frame[4:8] = (2).to_bytes(4, "little")  # the frame before it again
    c.set_frame(i, frame)
    return i, "OVP_SEQ_REGRESSION"


def o_server_frame_seq(c: Capture) -> tuple[int, str]:
    i = c.find("server", "frame", 3)
    frame = c.frame(i)
    frame[4:8] = (0).to_bytes(4, "little")
    c.set_frame(i, frame)
    return i, "OVP_SEQ_REGRESSION"


def o_frame_direction(c: Capture) -> tuple[int, str]:
    i = c.find("client", "frame", 3)
    frame = c.frame(i)
    frame[2:4] = (1).to_bytes(2, "little")  # says server to client, sent by the client
    c.set_frame(i, frame)
    return i, "OVP_AUDIO_FRAME_INVALID"


def o_frame_sender(c: Capture) -> tuple[int, str]:
    i = c.find("server", "frame", 3)
    c.lines[i]["from"] = "client"
    return i, "OVP_AUDIO_FRAME_INVALID"


def o_resume_beyond(c: Capture) -> tuple[int, str]:
    i = c.find("server", "agent.output")
    start = c.message(1)
    resume = {
        "type": "session.resume",
        "seq": 0,
        "ts": start["ts"],
        "session_id": start["session_id"],
    }
    c.insert(i + 1, "client", {**resume, "last_server_seq": c.message(i)["seq"] + 1})
    for sender_seq in range(3):  # the client's later events follow its resume
        j = c.find(
            "client",
            ("agent.handoff_accepted", "supervisor.takeover", "agent.handoff_completed")[
                sender_seq
            ],
        )
        c.update(j, seq=sender_seq + 1)
    return i + 1, "OVP_RESUME_EXPIRED"


def o_oversized(c: Capture) -> tuple[int, str]:
    i = c.find("server", "agent.output")
    c.update(i, text="x" * 70_000)
    return i, "OVP_EVENT_SCHEMA_INVALID"


def o_after_the_end(c: Capture) -> tuple[int, str]:
    i = c.find("server", "transcript.final")
    c.lines.append(c.lines[i])
    return len(c.lines) - 1, "OVP_EVENT_SCHEMA_INVALID"


BROKEN = {
    "brisvox": [b_bad_json, b_first_message, b_handshake_order, b_direction, b_seq_regression, b_seq_gap,
                b_t_ms_back, b_resume_fields, b_agent_version, b_binary, b_oversized],
    "ovp": [o_bad_json, o_first_message, o_direction, o_server_seq_regression, o_client_seq_regression,
            o_session_id, o_frame_header, o_frame_size, o_frame_seq, o_server_frame_seq, o_frame_direction,
            o_frame_sender, o_resume_beyond, o_oversized, o_after_the_end],
}  # fmt: skip


@pytest.mark.parametrize(
    ("protocol", "breaking"),
    [(protocol, case) for protocol, cases in BROKEN.items() for case in cases],
    ids=[case.__name__ for cases in BROKEN.values() for case in cases],
)
def test_validate_names_the_line_and_code_of_a_broken_rule(
    demo: tuple[subprocess.CompletedProcess[str], Path],
    tmp_path: Path,
    protocol: str,
    breaking: Any,
) -> None:
    capture = Capture(demo[1] / f"{protocol}.jsonl")
    index, code = breaking(capture)
    path = capture.write(tmp_path / "broken.jsonl")
    done = voxwire("validate", str(path), "--protocol", protocol)
    assert done.returncode == 1, done.stdout
    violations = [line for line in done.stdout.splitlines()[:-1] if ": note: " not in line]
    assert violations[0].startswith(f"{path}:{index + 1}: {code}: "), done.stdout
    assert len(violations) <= 2, done.stdout  # one broken rule, at most one consequence
    count = len(violations)
    assert done.stdout.splitlines()[-1].endswith(f", {count} violation{'s' if count > 1 else ''}")


def test_a_frame_seq_gap_is_a_note_not_a_violation(
    demo: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    capture = Capture(demo[1] / "ovp.jsonl")
    i = capture.find("client", "frame", 3)
    del capture.lines[i]  # frame_seq 3: lost
    path = capture.write(tmp_path / "gap.jsonl")
    done = voxwire("validate", str(path), "--protocol", "ovp")
    assert done.returncode == 0
    assert f"{path}:{i + 1}: note: frame_seq 4 after 2: 1 frame lost" in done.stdout
    del capture.lines[i : i + 2]  # and 4, 5
    done = voxwire("validate", str(capture.write(tmp_path / "gap2.jsonl")))
    assert "note: frame_seq 6 after 2: 3 frames lost" in done.stdout


def test_a_resumed_ovp_session_with_its_replay_is_clean(
    demo: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    """As the gateway records it: events 9 and 10 sent, the link drops, the client resumes
    having processed 8, and the gateway replays 9 and 10."""
    capture = Capture(demo[1] / "ovp.jsonl")
    ten = capture.find("server", "audio.egress")
    nine = capture.find("server", "agent.output")
    start = capture.message(1)
    resume = {
        "type": "session.resume",
        "seq": 0,
        "ts": start["ts"],
        "session_id": start["session_id"],
        "last_server_seq": 8,
    }
    replay = [capture.lines[nine], capture.lines[ten]]
    capture.insert(ten + 1, "client", resume)
    capture.lines[ten + 2 : ten + 2] = replay
    for seq, kind in enumerate(
        ("agent.handoff_accepted", "supervisor.takeover", "agent.handoff_completed"), 1
    ):
        capture.update(capture.find("client", kind), seq=seq)
    path = capture.write(tmp_path / "resumed.jsonl")
    done = voxwire("validate", str(path), "--protocol", "ovp")
    assert done.returncode == 0, done.stdout


def test_a_resumed_brisvox_call_is_clean(
    demo: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    """The agent declared resume; the link is lost after a tool call and taken up again."""
    capture = Capture(demo[1] / "brisvox.jsonl")
    capture.update(2, resume=True)
    start = capture.resume_brisvox(capture.find("agent", "tool.result"))
    path = capture.write(tmp_path / "resumed.jsonl")
    done = voxwire("validate", str(path), "--protocol", "brisvox")
    assert done.returncode == 0, done.stdout
    # The same without resume: true in the first accept: the engine may not reconnect.
    capture.update(2, resume=False)
    done = voxwire("validate", str(capture.write(path)), "--protocol", "brisvox")
    assert done.returncode == 1
    assert f"{path}:{start + 1}: bad_message: the engine would not reconnect" in done.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file or directory"),
        (b"", ":1: empty file: no capture header"),
        (b"\xff\xfe\x00garbage\n", "not UTF-8 text"),
        (b'{"capture": "pcap"}\n', ":1: not a voxwire capture"),
        (b"[" * 100_000 + b"]" * 100_000, ":1: the header is not one flat JSON object"),
    ],
)
def test_validate_refuses_what_it_cannot_read_in_one_line(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "capture.jsonl"
    if content is not None:
        path.write_bytes(content)
    done = voxwire("validate", str(path), "--protocol", "ovp")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"voxwire validate: {path}") and done.stderr.count("\n") == 1
    assert message in done.stderr


def test_validate_protocol_forces_its_rules_onto_a_capture(
    demo: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    """--protocol ovp on a Brisvox capture: the header is a violation, and every line is judged
    as OVP (the agent is no OVP sender; the engine's session.start no OVP session.start)."""
    path = demo[1] / "brisvox.jsonl"
    done = voxwire("validate", str(path), "--protocol", "ovp")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        f"{path}:1: capture: the header names protocol 'brisvox' (read as ovp, as --protocol says)"
    )
    assert lines[1].startswith(f"{path}:2: OVP_EVENT_SCHEMA_INVALID: session.start $.")
    assert f"{path}:3: capture: from must be one of ('server', 'client'), not 'agent'" in lines
    same = voxwire("validate", str(path), "--protocol", "brisvox")
    assert same.returncode == 0 and same.stdout.endswith(" 0 violations\n")


def test_validate_refuses_a_folder(tmp_path: Path) -> None:
    done = voxwire("validate", str(tmp_path), "--protocol", "ovp")
    assert (done.returncode, done.stderr) == (2, f"voxwire validate: {tmp_path}: Is a directory\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("validate", "--protocol", "ovp"), "the following arguments are required: FILE"),
        (("validate", "x.jsonl", "--protocol", "sip"), "invalid choice: 'sip'"),
        (("demo", "--protocol", "sip"), "invalid choice: 'sip'"),
        (("demo", "--speed", "2"), "unrecognized arguments: --speed 2"),
        (("demo", "--port", "8000"), "voxwire demo: --port serves the softphone: add --browser"),
        (("demo", "--browser", "--port", "65536"), "not a port (0 to 65535): '65536'"),
        (("demo", "--browser", "--port", "-1"), "not a port (0 to 65535): '-1'"),
        (("demo", "--browser", "--port", "x"), "not a port (0 to 65535): 'x'"),
        (
            ("demo", "--browser", "--protocol", "brisvox"),
            "the browser softphone speaks OVP: leave out --protocol brisvox",
        ),
    ],
)
def test_bad_arguments_of_demo_and_validate(args: tuple[str, ...], message: str) -> None:
    done = voxwire(*args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def _frames_capture(path: Path, start: str, count: int) -> Path:
    pcm = bytes(ovp.PCM_BYTES_PER_FRAME)
    with CaptureWriter(path, protocol="ovp", recorded_by="client") as capture:
        capture.record("server", start)
        for seq in range(count):
            frame = ovp.AudioFrame(
                direction=ovp.FrameDirection.CLIENT_TO_SERVER,
                frame_seq=seq,
                rtp_timestamp=0,
                pcm=pcm,
            )
            capture.record("client", ovp.encode_frame(frame))
    return path


def test_validate_shows_its_progress_on_stderr_when_it_runs_long(
    demo: tuple[subprocess.CompletedProcess[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    start = Capture(demo[1] / "ovp.jsonl").lines[1]["text"]
    path = _frames_capture(tmp_path / "long.jsonl", start, 2000)
    monkeypatch.setattr(cli, "PROGRESS_AFTER", 0.0)
    assert main(["validate", str(path), "--protocol", "ovp"]) == 0
    out, err = capsys.readouterr()
    assert out == f"{path}: 1 message, 2,000 frames, 0 violations\n"
    assert f"voxwire validate: {path}: " in err and "MB read" in err


def test_validate_reads_a_large_capture_in_constant_memory(
    demo: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    start = Capture(demo[1] / "ovp.jsonl").lines[1]["text"]
    peaks = []
    for count in (2_000, 20_000):
        path = _frames_capture(tmp_path / f"{count}.jsonl", start, count)
        tally = Tally()
        tracemalloc.start()
        with path.open(encoding="utf-8") as lines:
            _, findings = check_capture(lines, tally)
            assert list(findings) == []
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert tally.frames == count
    assert peaks[1] < 1.5 * peaks[0]  # ten times the frames, not ten times the memory


def test_validate_reads_the_protocol_from_the_header_and_standard_input(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    for protocol in ("brisvox", "ovp"):
        path = demo[1] / f"{protocol}.jsonl"
        done = voxwire("validate", str(path))
        assert done.returncode == 0, done.stderr
        piped = subprocess.run(
            [sys.executable, "-m", "voxwire", "validate", "-"],
            input=path.read_bytes(),
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert piped.returncode == 0, piped.stderr
        assert piped.stdout.decode() == done.stdout.replace(str(path), "<stdin>")
    done = voxwire("validate", "-", "--protocol", "brisvox")  # standard input is empty here
    assert done.returncode == 2 and "<stdin>:1: empty file" in done.stderr


def test_version_option_prints_what_the_version_command_prints() -> None:
    option, command = voxwire("--version"), voxwire("version")
    assert (option.returncode, option.stdout) == (0, command.stdout)


def _options(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(f"{name} {n}", a) for n, a in _options(sub)]
        else:
            found.append((action.dest, action))
    return found


def test_every_option_and_argument_has_help() -> None:
    options = _options(cli._parser())
    assert len(options) > 10
    assert [name for name, action in options if not action.help] == []


def test_ctrl_c_ends_the_command_with_130_and_no_traceback() -> None:
    # The demo prints unbuffered into a pipe that holds one page, less than its output, and the
    # test reads none of it before the signal: the demo cannot end before Ctrl-C lands.
    page = 4096
    # Where this test runs with Ctrl-C ignored (started in the background by a script), the demo
    # would inherit that; a handler is not inherited across exec, so it gets the default.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        demo = subprocess.Popen(
            [sys.executable, "-u", "-m", "voxwire", "demo"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pipesize=page,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert demo.stdout is not None
    assert fcntl.fcntl(demo.stdout, fcntl.F_GETPIPE_SZ) == page
    printed, _, _ = select.select([demo.stdout], [], [], 60)  # it runs (nothing read yet)
    demo.send_signal(signal.SIGINT)
    out, err = demo.communicate(timeout=30)
    assert printed and out.startswith("brisvox: one call")
    assert demo.returncode == cli.INTERRUPTED
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


@pytest.mark.parametrize("columns", [80, 100])
def test_the_demo_fits_the_terminal(columns: int) -> None:
    done = voxwire("demo", "--no-color", columns=columns)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert max(len(line) for line in lines) > columns - 10  # the room is used
