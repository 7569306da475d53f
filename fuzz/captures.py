"""The ``validate`` target: ``voxwire validate`` run on mutated captures, judged by its own promise.

The seeds are real captures, recorded when the target is built by the demo's calls on loopback
(each protocol from both sides: ``voxwire demo --record`` and its peers' ``record`` option). A
mutation changes the capture's lines (dropped, repeated, swapped, cut short, link events put
anywhere), a line's fields (``t`` of ``NaN``, ``1e308``, ``-1``; ``from`` swapped; text and
binary swapped; base64 with non-ASCII or padding faults), a message (the decoder targets'
structure-aware mutator on the texts of its sender, a frame mutated as the frame target does,
a legal message of an unknown type, a seq moved), the header, or the bytes (junk lines, deep
nesting, lines at the size bound and one byte past it, invalid UTF-8, lone surrogates, CRLF).

The oracle runs ``voxwire validate FILE`` in this process (``--protocol`` on a quarter of the
inputs) and holds it to its documented promise (docs/capture.md):

1. Nothing escapes ``main`` and no failure of voxwire's own is reported: either is a finding
   named by the exception and the place it was raised (``escape``).
2. The exit status is 0 for a clean capture, 1 when violations are reported, 2 only for a file
   that is no capture, with exactly one line on stderr naming the file (``exit``).
3. Every line on stdout is ``FILE:LINE: CODE: explanation`` with a line of the file, then the
   summary ``FILE: N messages, M frames, K violations``, K the number of violation lines
   (``output``).
4. No capture takes more CPU time than the bound (``slow``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import random
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any, Final

from fuzz.mutate import FrameMutator, MessageMutator
from fuzz.oracle import Finding, Outcome, exception_place
from fuzz.seeds import load_seeds
from voxwire.capture import LINK_EVENTS, MAX_LINE_BYTES, PROTOCOL_SENDERS
from voxwire.cli import BUG_REPORT, main
from voxwire.demo import run as play_demo
from voxwire.demo.timeline import Style, Timeline

__all__ = ["CaptureMutator", "ValidateOracle", "ValidateTarget", "record_captures"]

PROTOCOLS: Final = tuple(PROTOCOL_SENDERS)
T_VALUES: Final = (
    float("nan"),
    float("inf"),
    -1.0,
    -0.0,
    0,
    1e308,
    9007199254740.991,
    9007199254740.992,
    1e-320,
    2**64,
    10**30,
    "1.0",
    None,
    True,
    [1],
)
BASE64_FAULTS: Final = ("é", "\ud800", "AAA", "====", "", "QUJD\n", "not base64!", "QQ=", "Q===")
JUNK_TEXTS: Final = ("hello", "[1,2]", "", "null", "{}", '{"type":"session.start"}', "\ud800")
JUNK_LINES: Final = (
    b"",
    b"   ",
    b"{",
    b"[]",
    b"1",
    b'"a string"',
    b"\x00",
    b"\xff\xfe",
    b'{"t":1}',
    b'{"t":NaN,"link":"open"}',
    b'{"t":1e400,"link":"open"}',
    b'{"t":0.1,"from":"server","text":"\\ud800"}',
    b'{"t":0.1,"from":"server","binary":"\xc3\xa9"}',
    b'{"t":0.1,"from":"server","text":"a","text":"b"}',
)
DEPTHS: Final = (1, 2, 3, 1000, 100_000)
EDGE_TS: Final = ("2026-05-14T12:34:56Z", "9999-12-31T23:59:59.999Z", "0001-01-01T00:00:00Z")
UNKNOWN_TYPES: Final = ("future.event", "x", "session.started", "TYPE")


def record_captures() -> list[str]:
    """Every capture the demo's two calls record, from both sides of each, as text."""
    with tempfile.TemporaryDirectory(prefix="voxwire-fuzz-") as folder:
        where = Path(folder)
        quiet = Style(color=False, unicode=False)
        play_demo(PROTOCOLS, out=io.StringIO(), style=quiet, record=where)  # engine, client
        asyncio.run(_record_peers(where / "{session_id}.jsonl"))  # agent, gateway
        return [path.read_text(encoding="utf-8") for path in sorted(where.glob("*.jsonl"))]


async def _record_peers(template: Path) -> None:
    quiet = Style(color=False, unicode=False)
    for protocol, option in (("brisvox", "record_agent"), ("ovp", "record_gateway")):
        call = import_module(f"voxwire.demo.{protocol}_call")
        await call.play(Timeline(protocol, out=io.StringIO(), style=quiet), **{option: template})


@dataclass
class _Capture:
    """A capture being mutated: its header and lines (a dict, or raw bytes written as is)."""

    protocol: str
    header: Any
    lines: list[Any]


class CaptureMutator:
    """Mutated captures, from recorded ones: one to three mutations each, then written."""

    def __init__(self, rng: random.Random, captures: list[str]) -> None:
        self._rng = rng
        self._seeds: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        texts: dict[tuple[str, str], list[bytes]] = {}
        frames: list[bytes] = []
        for capture in captures:
            header, *lines = [json.loads(line) for line in capture.splitlines()]
            self._seeds.append((header, lines))
            for line in lines:
                if "text" in line:
                    key = (header["protocol"], line["from"])
                    texts.setdefault(key, []).append(line["text"].encode())
                elif "binary" in line:
                    frames.append(base64.b64decode(line["binary"]))
        self._messages = {
            (protocol, sender): MessageMutator(rng, seeds, *_types_and_limit(protocol))
            for (protocol, sender), seeds in texts.items()
        }
        self._frames = FrameMutator(rng, frames)
        self._mutations: list[Callable[[_Capture], None]] = [
            self._drop,
            self._repeat,
            self._swap,
            self._cut,
            self._link_event,
            self._t,
            self._sender,
            self._kind,
            self._base64,
            self._message,
            self._message,
            self._unknown_type,
            self._seq,
            self._junk_text,
            self._frame,
            self._keys,
            self._junk_line,
            self._deep,
            self._long_line,
            self._header,
            self._no_start,
        ]

    def __call__(self) -> bytes:
        rng = self._rng
        header, lines = rng.choice(self._seeds)
        capture = _Capture(header["protocol"], dict(header), [dict(line) for line in lines])
        if rng.random() < 0.5:  # most mutations show within the call's first lines
            del capture.lines[rng.randrange(1, len(capture.lines) + 1) :]
        for _ in range(rng.choice((1, 1, 2, 3))):
            rng.choice(self._mutations)(capture)
        return self._written(capture)

    def _written(self, capture: _Capture) -> bytes:
        rng = self._rng
        ascii_only = rng.random() < 0.2
        rows = [self._row(capture.header, ascii_only)]
        rows += [self._row(line, ascii_only) for line in capture.lines]
        newline = rng.choice((b"\n", b"\n", b"\n", b"\r\n"))
        data = newline.join(rows) + (newline if rng.random() < 0.9 else b"")
        choice = rng.randrange(40)
        if choice == 0:
            return b""
        if choice == 1:
            return b"\xef\xbb\xbf" + data
        if choice == 2 and data:
            at = rng.randrange(len(data))
            return data[:at] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80")) + data[at:]
        return data

    @staticmethod
    def _row(line: Any, ascii_only: bool) -> bytes:
        if isinstance(line, bytes):
            return line
        text = json.dumps(line, ensure_ascii=ascii_only, separators=(",", ":"))
        return text.encode("utf-8", "surrogatepass")

    def _at(self, capture: _Capture) -> int | None:
        return self._rng.randrange(len(capture.lines)) if capture.lines else None

    def _message_at(self, capture: _Capture, kind: str = "text") -> dict[str, Any] | None:
        found = [line for line in capture.lines if isinstance(line, dict) and kind in line]
        return self._rng.choice(found) if found else None

    # -- lines -------------------------------------------------------------------------------

    def _drop(self, capture: _Capture) -> None:
        i = self._at(capture)
        if i is not None:
            del capture.lines[i]

    def _repeat(self, capture: _Capture) -> None:
        i = self._at(capture)
        if i is not None:
            capture.lines.insert(i, capture.lines[i])

    def _swap(self, capture: _Capture) -> None:
        i = self._at(capture)
        if i is not None and i + 1 < len(capture.lines):
            lines = capture.lines
            lines[i], lines[i + 1] = lines[i + 1], lines[i]

    def _cut(self, capture: _Capture) -> None:
        del capture.lines[self._rng.randrange(len(capture.lines) + 1) :]

    def _link_event(self, capture: _Capture) -> None:
        rng = self._rng
        at = rng.randrange(len(capture.lines) + 1)
        before = capture.lines[at - 1] if at else None
        t = before.get("t", 0.0) if isinstance(before, dict) else 0.0
        event = rng.choice((*LINK_EVENTS, "open", "open", "up", 1))
        capture.lines.insert(at, {"t": t, "link": event})

    # -- fields ------------------------------------------------------------------------------

    def _t(self, capture: _Capture) -> None:
        i = self._at(capture)
        if i is not None and isinstance(capture.lines[i], dict):
            capture.lines[i]["t"] = self._rng.choice(T_VALUES)

    def _sender(self, capture: _Capture) -> None:
        i = self._at(capture)
        if i is not None and isinstance(capture.lines[i], dict):
            senders = (*PROTOCOL_SENDERS[capture.protocol], "engine", "", None, 1)
            capture.lines[i]["from"] = self._rng.choice(senders)

    def _kind(self, capture: _Capture) -> None:
        line = self._message_at(capture, self._rng.choice(("text", "binary")))
        if line is not None:
            kind = "text" if "text" in line else "binary"
            line["binary" if kind == "text" else "text"] = line.pop(kind)

    def _base64(self, capture: _Capture) -> None:
        line = self._message_at(capture, "binary") or self._message_at(capture)
        if line is not None:
            line.pop("text", None)
            line["binary"] = self._rng.choice(BASE64_FAULTS)

    def _keys(self, capture: _Capture) -> None:
        i = self._at(capture)
        if i is None or not isinstance(capture.lines[i], dict):
            return
        line = capture.lines[i]
        choice = self._rng.randrange(4)
        if choice == 0:
            line["extra"] = 1
        elif choice == 1:
            line["text" if "binary" in line else "binary"] = ""
        elif choice == 2:
            line.pop("text", None)
            line.pop("binary", None)
        else:
            line.pop("t", None)

    # -- messages ----------------------------------------------------------------------------

    def _message(self, capture: _Capture) -> None:
        line = self._message_at(capture)
        mutator = None if line is None else self._messages.get((capture.protocol, line["from"]))
        if line is not None and mutator is not None:
            line["text"] = mutator().decode("utf-8", "surrogateescape")

    def _frame(self, capture: _Capture) -> None:
        line = self._message_at(capture, "binary")
        if line is not None:
            line["binary"] = base64.b64encode(self._frames()).decode("ascii")

    def _unknown_type(self, capture: _Capture) -> None:
        """A message of a type this version does not know, its envelope intact: legal where the
        protocol lets the sender add types."""
        line = self._message_at(capture)
        message = _object(line["text"]) if line is not None else None
        if line is not None and message is not None:
            message["type"] = self._rng.choice(UNKNOWN_TYPES)
            if self._rng.random() < 0.5:
                message["future_field"] = [1, {"a": None}]
            line["text"] = json.dumps(message)

    def _seq(self, capture: _Capture) -> None:
        line = self._message_at(capture)
        message = _object(line["text"]) if line is not None else None
        keys = [k for k in ("seq", "t_ms", "ts", "session_id") if message and k in message]
        if line is None or message is None or not keys:
            return
        key = self._rng.choice(keys)
        value = message.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            message[key] = value + self._rng.choice((-1, 1, 2, -(2**40)))
        else:
            message[key] = self._rng.choice(("", 0, None, *EDGE_TS))
        line["text"] = json.dumps(message)

    def _junk_text(self, capture: _Capture) -> None:
        line = self._message_at(capture)
        if line is not None:
            line["text"] = self._rng.choice(JUNK_TEXTS)

    def _no_start(self, capture: _Capture) -> None:
        """Only junk texts: the capture of no session at all."""
        sender = self._rng.choice(PROTOCOL_SENDERS[capture.protocol])
        texts = self._rng.sample(JUNK_TEXTS, 2)
        capture.lines = [{"t": 0.1 * i, "from": sender, "text": t} for i, t in enumerate(texts)]

    # -- bytes -------------------------------------------------------------------------------

    def _junk_line(self, capture: _Capture) -> None:
        rng = self._rng
        junk = rng.choice((*JUNK_LINES, rng.randbytes(rng.choice((1, 8, 64)))))
        capture.lines.insert(rng.randrange(len(capture.lines) + 1), junk)

    def _deep(self, capture: _Capture) -> None:
        rng = self._rng
        depth = rng.choice(DEPTHS)
        nest = rng.choice(("[", "{"))
        inner = (
            ("[" * depth + "]" * depth) if nest == "[" else ('{"a":' * depth + "1" + "}" * depth)
        )
        where = rng.randrange(3)
        if where == 0:  # the line itself
            row: Any = inner.encode()
        elif where == 1:  # a value of the line
            row = ('{"t":0.1,"from":"server","text":' + inner + "}").encode()
        else:  # inside the message
            row = {"t": 0.1, "from": "server", "text": '{"type":"x","a":' + inner + "}"}
        capture.lines.insert(rng.randrange(len(capture.lines) + 1), row)

    def _long_line(self, capture: _Capture) -> None:
        """A line at the size bound, one byte over it, or far over it."""
        rng = self._rng
        size = rng.choice(
            (MAX_LINE_BYTES, MAX_LINE_BYTES + 1, MAX_LINE_BYTES - 1, 4 * MAX_LINE_BYTES)
        )
        head = b'{"t":0.1,"from":"server","text":"'
        fill = size - len(head) - 2
        row = head + rng.choice((b"a", b"\\n")) * (fill // 2) + b"a" * (fill % 2) + b'"}'
        capture.lines.insert(rng.randrange(len(capture.lines) + 1), row)

    def _header(self, capture: _Capture) -> None:
        rng = self._rng
        if not isinstance(capture.header, dict):
            return
        key = rng.choice(("capture", "version", "protocol", "recorded_by", "extra"))
        value = rng.choice(
            (None, 0, 1, 2, 3, "2", True, "ovp", "brisvox", "voxwire", "agent", "client", "")
        )
        if rng.random() < 0.2:
            capture.header.pop(key, None)
        else:
            capture.header[key] = value
        if rng.random() < 0.05:
            capture.header = rng.choice(([capture.header], "header", None))


def _object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and value else None


def _types_and_limit(protocol: str) -> tuple[list[str], int]:
    """Every wire type of the protocol, and its largest message in bytes."""
    types = load_seeds(protocol).types
    limit: int = import_module(f"voxwire.{protocol}").MAX_MESSAGE_BYTES
    return sorted({t for each in types.values() for t in each}), limit


FINDING: Final = re.compile(r"(?P<name>.+?):(?P<line>[0-9]+): (?P<code>[A-Za-z_]+): (?P<text>.+)")
SUMMARY: Final = re.compile(
    r"(?P<name>.+): (?P<messages>[0-9,]+) messages?, (?P<frames>[0-9,]+) frames?, "
    r"(?P<violations>[0-9,]+) violations?"
)
PROGRESS: Final = " MB read"
"""What a progress line on stderr says (a slow capture shows its progress)."""


class ValidateOracle:
    """Runs ``voxwire validate`` on each input, in this process, and judges what it did."""

    def __init__(self, time_bound: float, rng: random.Random) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="voxwire-fuzz-")
        self._path = Path(self._folder.name) / "capture.jsonl"
        self._time_bound = time_bound
        self._rng = rng

    def __call__(self, data: bytes) -> Outcome:
        self._path.write_bytes(data)
        args = ["validate", str(self._path)]
        if self._rng.random() < 0.25:
            args += ["--protocol", self._rng.choice(PROTOCOLS)]
        out, err = io.StringIO(), io.StringIO()
        started = time.process_time()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = main(args)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # everything else is a finding
            return Outcome(
                "escaped", [Finding("escape", f"validate: {exception_place(exc)}", data)]
            )
        elapsed = time.process_time() - started
        findings = self._judge(status, out.getvalue(), err.getvalue(), data, args[2:])
        if elapsed > self._time_bound:
            findings.append(
                Finding("slow", f"{elapsed:.2f} s of CPU, bound {self._time_bound} s", data)
            )
        label = {0: "accepted", 1: "violations", 2: "not a capture"}.get(status, str(status))
        return Outcome(label, findings)

    def _judge(
        self, status: int, out: str, err: str, data: bytes, options: list[str]
    ) -> list[Finding]:
        name = str(self._path)
        given = f" ({' '.join(options)})" if options else ""
        errors = [line for line in err.splitlines() if PROGRESS not in line]
        if BUG_REPORT in err:
            return [Finding("escape", _shape(errors[-1], name), data)]
        if status == 2:
            if out or len(errors) != 1 or not errors[0].startswith(f"voxwire validate: {name}"):
                shown = f"{len(out.splitlines())} lines on stdout, stderr {_shape(err, name)}"
                return [Finding("exit", f"exit 2{given} with {shown}", data)]
            return []
        if status not in (0, 1) or errors:
            return [Finding("exit", f"exit {status}{given} with stderr {_shape(err, name)}", data)]
        return self._output(status, out.splitlines(), data, given)

    def _output(self, status: int, lines: list[str], data: bytes, given: str) -> list[Finding]:
        name = str(self._path)
        count = data.count(b"\n") + 1
        summary = SUMMARY.fullmatch(lines[-1]) if lines else None
        if summary is None or summary["name"] != name:
            return [Finding("output", f"no summary line{given}: {lines[-1:]!r}", data)]
        violations = 0
        for line in lines[:-1]:
            found = FINDING.fullmatch(line)
            if found is None or found["name"] != name or not 1 <= int(found["line"]) <= count:
                return [
                    Finding(
                        "output", f"not FILE:LINE: CODE: explanation{given}: {line[:100]!r}", data
                    )
                ]
            violations += found["code"] != "note"
        said = int(summary["violations"].replace(",", ""))
        if said != violations or status != (1 if violations else 0):
            return [
                Finding(
                    "exit",
                    f"exit {status}, {violations} violation lines, summary {said}{given}",
                    data,
                )
            ]
        return []


def _shape(text: str, name: str) -> str:
    """What a message says, without the file's name or numbers (one finding for one cause)."""
    return repr(re.sub(r"[0-9]+", "N", text.replace(name, "FILE"))[:100])


@dataclass(frozen=True)
class ValidateTarget:
    """``voxwire validate`` as a fuzzing target (``python -m fuzz --target validate``)."""

    name: str = "validate"

    def build(
        self, seed: int, time_bound: float
    ) -> tuple[Callable[[], bytes], Callable[[bytes], Outcome]]:
        """The capture mutator (from captures recorded now) and the oracle, from ``seed``."""
        inputs = random.Random(f"{seed}/{self.name}/inputs")
        judging = random.Random(f"{seed}/{self.name}/oracle")
        return CaptureMutator(inputs, record_captures()), ValidateOracle(time_bound, judging)
