"""Run the conformance vectors against voxwire, or against another implementation.

```text
python -m voxwire.conformance                     # every vector against voxwire, in process
python -m voxwire.conformance --testee "CMD ..."  # against another implementation (stdin/stdout)
python -m voxwire.conformance --serve             # voxwire as a testee, for the line above
```

The vectors are JSON Lines shipped in the package (``voxwire/<protocol>/vectors.jsonl``, generated
from the spec, and ``vectors_handwritten.jsonl``); docs/conformance.md specifies their format and
the testee's line protocol.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import collections
import importlib
import json
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import IO, Any, Final

from voxwire._rules import json_equal
from voxwire.conformance.sessions import LINK_STEPS, play
from voxwire.errors import VoxwireError
from voxwire.machine import traced

__all__ = [
    "DEFAULT_EXPECTED_FAILURES",
    "KINDS",
    "PROTOCOLS",
    "Case",
    "Outcome",
    "Report",
    "Testee",
    "VectorError",
    "answer",
    "check",
    "json_equal",
    "load_cases",
    "load_expected_failures",
    "main",
    "read_vectors",
    "request",
    "run",
    "serve",
]

PROTOCOLS: Final = ("brisvox", "ovp")
"""The protocols whose vectors ship with voxwire."""
KINDS: Final = ("decode", "frame", "session")
"""The kinds of case the format defines."""
VECTOR_FILES: Final = ("vectors.jsonl", "vectors_handwritten.jsonl", "sessions.jsonl")
DEFAULT_EXPECTED_FAILURES: Final = "expected_failures.txt"
"""voxwire's own list, beside this module: applied when no testee is named."""
_SHOWN: Final = 400
"""Characters of a value shown in a failure report."""
_GIVE_UP: Final = 5
"""Crashes or timeouts in a row after which the testee is not started again."""


class VectorError(VoxwireError, ValueError):
    """A vectors or expected-failures file that does not follow the format."""


@dataclass(frozen=True)
class Case:
    """One conformance case, as read from a vectors file."""

    id: str
    protocol: str
    kind: str
    data: dict[str, Any]
    """The whole case object."""
    where: str
    """file:line it was read from."""

    @property
    def expect(self) -> dict[str, Any]:
        expect: dict[str, Any] = self.data["expect"]
        return expect


# -- reading vectors ---------------------------------------------------------------------------


def _packaged_files() -> list[tuple[str, str]]:
    """(name, text) of every vectors file shipped in the package, in a stable order.

    A protocol package is one folder in a wheel but two in an editable install (the generated
    and the hand-written halves), so every folder of its ``__path__`` is searched.
    """
    found: list[tuple[str, str]] = []
    for protocol in PROTOCOLS:
        package = importlib.import_module(f"voxwire.{protocol}")
        roots: list[Any] = [resources.files(package)]
        roots += [Path(entry) for entry in getattr(package, "__path__", [])]
        seen: set[str] = set()
        for name in VECTOR_FILES:
            for root in roots:
                resource = root.joinpath(name)
                key = str(resource)
                if key in seen or not resource.is_file():
                    continue
                seen.add(key)
                found.append((f"voxwire/{protocol}/{name}", resource.read_text(encoding="utf-8")))
                break
    return found


def read_vectors(text: str, name: str) -> list[Case]:
    """The cases of one vectors file; a header line (no ``id``) is skipped."""
    cases = []
    # Lines end at "\n" only: a raw U+2028 inside a JSON string is no line break here.
    for number, line in enumerate(text.split("\n"), 1):
        where = f"{name}:{number}"
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise VectorError(f"{where}: not a JSON line: {exc}") from None
        if not isinstance(data, dict):
            raise VectorError(f"{where}: a line must be a JSON object")
        if "id" not in data:
            if number == 1 and "generated_by" in data:
                continue  # the header of a generated file
            raise VectorError(f"{where}: a case needs an id")
        cases.append(_case(data, where))
    return cases


def _case(data: dict[str, Any], where: str) -> Case:
    def need(key: str, kind: type | tuple[type, ...]) -> Any:
        if not isinstance(data.get(key), kind):
            what = (
                kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            )
            raise VectorError(f"{where}: {data.get('id')!r}: `{key}` is missing or not a {what}")
        return data[key]

    case_id = need("id", str)
    protocol = need("protocol", str)
    kind = need("kind", str)
    if kind not in KINDS:
        raise VectorError(f"{where}: {case_id}: unknown kind {kind!r}")
    need("expect", dict)
    need("source", str)
    if kind != "session":
        data_in = need("input", dict)
        if len(data_in) != 1 or next(iter(data_in)) not in ("text", "base64", "hex"):
            raise VectorError(f"{where}: {case_id}: input is one of text, base64 or hex")
        _input_bytes(data_in, where)
    if kind == "decode":
        need("sender", str)
    if kind == "session":
        need("side", str)
        steps = need("steps", list)
        verdicts = data["expect"].get("steps")
        if not isinstance(verdicts, list) or len(verdicts) != len(steps):
            raise VectorError(f"{where}: {case_id}: expect.steps has one verdict per step")
        _check_steps_form(steps, f"{where}: {case_id}")
        _check_covers(data.get("covers", []), f"{where}: {case_id}")
    return Case(case_id, protocol, kind, data, where)


def _check_steps_form(steps: list[Any], where: str) -> None:
    """Every step is a message (``from``, ``text``), a link event, an application's call, a
    wait or the side's next seq, at a time never going back."""
    last = 0.0
    for index, step in enumerate(steps):
        t = step.get("t") if isinstance(step, dict) else None
        if not isinstance(t, (int, float)) or isinstance(t, bool) or t < last:
            raise VectorError(f"{where}: step {index} has no time `t` at or after {last}")
        last = t
        if not _step_form(step):
            raise VectorError(
                f"{where}: step {index} is neither a message, a link event, a call, a wait "
                "nor a next seq"
            )


def _step_form(step: dict[str, Any]) -> bool:
    """Whether ``step`` has one of the forms of docs/conformance.md, "Sessions"."""
    if isinstance(step.get("from"), str) and isinstance(step.get("text"), str):
        return True
    seq = step.get("next_seq")
    return (
        step.get("link") in LINK_STEPS
        or isinstance(step.get("call"), str)
        or step.get("wait") is True
        or (type(seq) is int and seq >= 0)
    )


def _check_covers(covers: Any, where: str) -> None:
    """A session case's ``covers``: ``"<role> <state>.<input>"`` strings."""
    if not isinstance(covers, list) or not all(
        isinstance(c, str) and re.fullmatch(r"\w+ \w+\.\w+", c) for c in covers
    ):
        raise VectorError(f'{where}: covers is a list of "<role> <state>.<input>" strings')


def _input_bytes(data_in: dict[str, Any], where: str = "") -> bytes:
    (key, value), *_ = data_in.items()
    if not isinstance(value, str):
        raise VectorError(f"{where}: input.{key} is not a string")
    try:
        if key == "text":
            return value.encode("utf-8")
        if key == "base64":
            return base64.b64decode(value, validate=True)
        return bytes.fromhex(value)
    except (UnicodeEncodeError, binascii.Error, ValueError) as exc:
        raise VectorError(f"{where}: input.{key}: {exc}") from None


def load_cases(paths: Sequence[str | Path] | None = None) -> list[Case]:
    """The cases of ``paths`` (files), or of every vectors file shipped with voxwire."""
    files = (
        [(str(p), Path(p).read_text(encoding="utf-8")) for p in paths]
        if paths
        else _packaged_files()
    )
    cases: list[Case] = []
    seen: dict[str, str] = {}
    for name, text in files:
        for case in read_vectors(text, name):
            if case.id in seen:
                raise VectorError(
                    f"{case.where}: duplicate id {case.id} (first at {seen[case.id]})"
                )
            seen[case.id] = case.where
            cases.append(case)
    return cases


def load_expected_failures(text: str, name: str) -> dict[str, str]:
    """Case id -> its note, from an expected-failures file.

    One id a line; ``#`` starts a comment. The comment lines above a group of ids are their note,
    unless an id's own line carries one after a ``#``.
    """
    out: dict[str, str] = {}
    comment: list[str] = []
    after_id = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            comment, after_id = [], False
            continue
        if stripped.startswith("#"):
            if after_id:
                comment, after_id = [], False
            comment.append(stripped.lstrip("#").strip())
            continue
        after_id = True
        case_id, _, note = stripped.partition("#")
        case_id = case_id.strip()
        if " " in case_id:
            raise VectorError(f"{name}:{number}: one case id a line, not {case_id!r}")
        out[case_id] = note.strip() or " ".join(comment)
    return out


def _default_expected_failures() -> dict[str, str]:
    resource = resources.files(__name__).joinpath(DEFAULT_EXPECTED_FAILURES)
    return load_expected_failures(resource.read_text(encoding="utf-8"), DEFAULT_EXPECTED_FAILURES)


# -- voxwire as the implementation -------------------------------------------------------------


def request(case: Case) -> dict[str, Any]:
    """What a testee is sent for ``case``: the case without its expectation and notes."""
    return {
        key: value
        for key, value in case.data.items()
        if key in ("id", "protocol", "kind", "sender", "frame", "input", "steps", "side")
    }


def answer(req: dict[str, Any]) -> dict[str, Any]:
    """voxwire's answer to one request (the testee line protocol's answer object).

    Never raises: anything voxwire should not do (another exception than its
    ``ProtocolError``) becomes an ``error`` answer.
    """
    case_id = req.get("id")
    try:
        protocol = req.get("protocol")
        if protocol not in PROTOCOLS:
            return {"id": case_id, "error": f"unknown protocol {protocol!r}"}
        kind = req.get("kind")
        if kind == "session":
            with traced() as taken:
                steps = play(protocol, str(req.get("side")), req["steps"])
            claims = dict.fromkeys(f"{t.role} {t.state}.{t.input}" for t in taken)
            return {"id": case_id, "steps": steps, "taken": list(claims)}
        module = importlib.import_module(f"voxwire.{protocol}")
        data = _input_bytes(req.get("input") or {})
        if kind == "decode":
            return {
                "id": case_id,
                **_decode(module, data, req.get("sender"), "text" in req["input"]),
            }
        if kind == "frame":
            return {"id": case_id, **_frame(module, data, req.get("sender"))}
        return {"id": case_id, "error": f"kind {kind!r} is not supported by voxwire's runner yet"}
    except Exception as exc:  # the runner reports it; it never stops the run
        return {"id": case_id, "error": f"{type(exc).__name__}: {exc}"}


def _decode(module: ModuleType, data: bytes, sender: Any, is_text: bool) -> dict[str, Any]:
    got = _decode_one(module, data, sender)
    if is_text and "error" not in got:
        # voxwire also takes a str (text frames): the same message must give the same answer.
        again = _decode_one(module, data.decode("utf-8"), sender)
        if not json_equal(again, got):
            return {"error": f"bytes and str inputs disagree: {_short(got)} vs {_short(again)}"}
    return got


def _decode_one(module: ModuleType, data: bytes | str, sender: Any) -> dict[str, Any]:
    try:
        message = module.decode(data, sender=sender)
    except module.ProtocolError as exc:
        return {"valid": False, "code": str(exc.code)}
    except Exception as exc:
        return {"error": f"decode raised {type(exc).__name__} (not a ProtocolError): {exc}"}
    try:
        value = json.loads(module.encode(message))
    except module.ProtocolError as exc:  # read at the bound, written longer: size-counted-as-sent
        return {"valid": True, "type": message.type, "encode_code": str(exc.code)}
    except Exception as exc:
        return {"error": f"encode of the decoded message raised {type(exc).__name__}: {exc}"}
    got: dict[str, Any] = {"valid": True, "type": message.type, "value": value}
    if isinstance(message, module.UnknownMessage):
        got["unknown"] = True
    return got


def _frame(module: ModuleType, data: bytes, sender: Any) -> dict[str, Any]:
    expected = None
    if sender is not None:
        expected = next(
            (d for d in module.FrameDirection if d.name.lower().startswith(f"{sender}_to_")), None
        )
        if expected is None:
            return {"error": f"no frame direction for sender {sender!r}"}
    try:
        frame = module.decode_frame(data, expected_direction=expected)
    except module.ProtocolError as exc:
        return {"valid": False, "code": str(exc.code)}
    except Exception as exc:
        return {"error": f"decode_frame raised {type(exc).__name__} (not a ProtocolError): {exc}"}
    header: dict[str, Any] = {}
    payload = b""
    for name in frame.__struct_fields__:
        value = getattr(frame, name)
        if isinstance(value, bytes | bytearray | memoryview):
            payload = bytes(value)
        else:
            header[name] = int(value)
    if module.encode_frame(frame) != data:
        return {"error": "encode_frame(decode_frame(b)) != b"}
    return {"valid": True, "header": header, "payload_hex": payload.hex()}


# -- judging an answer -------------------------------------------------------------------------


def _check_steps(expected: list[Any], got: Any) -> str | None:
    """Why a session case's verdicts differ: the first step that differs, with both."""
    if not isinstance(got, list) or len(got) != len(expected):
        return f"expected {len(expected)} step verdicts, got {_short(got)}"
    for index, (want, have) in enumerate(zip(expected, got, strict=True)):
        if not json_equal(want, have):
            return f"step {index}: expected {_short(want)}, got {_short(have)}"
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
        out = []
        for (protocol, kind), items in sorted(groups.items()):
            passed = sum(1 for o in items if o.problem is None and o.expected_failure is None)
            xfail = sum(1 for o in items if o.problem is not None and o.expected_failure)
            failed = sum(1 for o in items if o.problem is not None and not o.expected_failure)
            stale = sum(1 for o in items if o.problem is None and o.expected_failure)
            text = f"{protocol} {kind}: {len(items)} cases, {passed} passed, {failed} failed"
            if xfail:
                text += f", {xfail} expected failures"
            if stale:
                text += f", {stale} listed as expected failures but passed"
            out.append(text)
        for o in self.outcomes:
            if o.ok and not (verbose and o.expected_failure):
                continue
            if o.problem is None:
                out.append(f"PASSED BUT LISTED {o.case.id} ({o.expected_failure})")
                out.append("  remove it from the expected-failures list")
                continue
            label = "EXPECTED FAILURE" if o.expected_failure else "FAIL"
            out.append(f"{label} {o.case.id}: {o.problem}")
            out.append(f"  expected: {_short(o.case.expect)}")
            out.append(f"  got:      {_short(o.got)}")
            out.append(f"  source:   {o.case.data.get('source')} ({o.case.where})")
            if o.expected_failure:
                out.append(f"  listed:   {o.expected_failure}")
        for case_id in self.unknown_expected:
            out.append(f"UNKNOWN EXPECTED FAILURE {case_id}: no case has this id")
        total = len(self.outcomes)
        bad = sum(1 for o in self.outcomes if not o.ok) + len(self.unknown_expected)
        out.append(f"{'OK' if self.ok else 'FAILED'}: {total} cases, {bad} unexpected")
        return out


def _short(value: Any) -> str:
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


# -- another implementation over stdin/stdout --------------------------------------------------


class Testee:
    """Another implementation, spoken to over its stdin and stdout, one JSON line each way.

    A testee that crashes, hangs past the timeout or answers out of turn is restarted for the
    next case; its answer to the case it failed on says what happened.
    """

    def __init__(self, command: Sequence[str], timeout: float, startup: float = 30.0) -> None:
        self.command = list(command)
        self.timeout = timeout
        self.startup = startup
        self.process: subprocess.Popen[bytes] | None = None
        self.answers: queue.Queue[bytes | None] = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=20)
        self.fresh = True
        self.failures_in_a_row = 0

    def start(self) -> None:
        try:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            raise VectorError(
                f"cannot start the testee {shlex.join(self.command)}: {exc}"
            ) from None
        self.answers = queue.Queue()
        self.stderr.clear()
        self.fresh = True
        process = self.process
        threading.Thread(target=self._read, args=(process,), daemon=True).start()
        threading.Thread(target=self._read_stderr, args=(process,), daemon=True).start()

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.answers.put(line)
        self.answers.put(None)

    def _read_stderr(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.stderr.append(line.decode("utf-8", "replace").rstrip())

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        for stream in (process.stdin,):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _crash(self) -> str:
        assert self.process is not None
        code = self.process.poll()
        if code is None:
            try:
                code = self.process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                code = None
        tail = " | ".join(list(self.stderr)[-5:])
        status = f"exited with status {code}" if code is not None else "closed its stdout"
        return f"the testee {status}" + (f"; its stderr ends: {tail}" if tail else "")

    def ask(self, case: Case) -> dict[str, Any]:
        """The testee's answer to ``case``, or an ``error`` answer saying what went wrong."""
        if self.failures_in_a_row >= _GIVE_UP:
            return {"error": f"not run: the testee failed {_GIVE_UP} cases in a row"}
        if self.process is None or self.process.poll() is not None:
            if self.process is not None:
                self.stop()
            self.start()
        assert self.process is not None and self.process.stdin is not None
        line = json.dumps(request(case)).encode("ascii") + b"\n"  # ASCII: \u escapes
        writer = threading.Thread(target=self._write, args=(self.process, line), daemon=True)
        writer.start()
        wait = self.timeout + (self.startup if self.fresh else 0.0)
        try:
            raw = self.answers.get(timeout=wait)
        except queue.Empty:
            self._restart()
            return self._failed(f"no answer within {wait:g} s (the testee was restarted)")
        if raw is None:
            problem = self._crash()
            self._restart()
            return self._failed(problem)
        self.fresh = False
        text = raw.decode("utf-8", "replace").strip()
        self.failures_in_a_row = 0
        try:
            got = json.loads(text)
        except (ValueError, RecursionError):
            return {"error": f"the testee answered garbage: {text[:200]!r}"}
        if not isinstance(got, dict):
            return {"error": f"the testee answered garbage: {text[:200]!r}"}
        if got.get("id") != case.id:
            self._restart()
            return self._failed(
                f"the testee answered for id {got.get('id')!r} (out of turn; restarted it)"
            )
        return got

    def _write(self, process: subprocess.Popen[bytes], line: bytes) -> None:
        try:
            assert process.stdin is not None
            process.stdin.write(line)
            process.stdin.flush()
        except (OSError, ValueError):
            pass  # the process died: the reader reports it

    def _failed(self, problem: str) -> dict[str, Any]:
        self.failures_in_a_row += 1
        return {"error": problem}

    def _restart(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()


# -- voxwire as a testee -----------------------------------------------------------------------


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """Answer requests, one JSON line each way, until stdin ends (voxwire as a testee)."""
    for raw in stdin:
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            continue
        try:
            req = json.loads(text)
        except (ValueError, RecursionError) as exc:
            got: dict[str, Any] = {"id": None, "error": f"not a JSON request: {exc}"}
        else:
            got = answer(req) if isinstance(req, dict) else {"id": None, "error": "not an object"}
        stdout.write(_answer_line(got))
        stdout.flush()
    return 0


def _answer_line(got: dict[str, Any]) -> bytes:
    try:
        return json.dumps(got, ensure_ascii=False, allow_nan=False).encode("utf-8") + b"\n"
    except (ValueError, RecursionError) as exc:
        fallback = {"id": got.get("id"), "error": f"the answer cannot be written as JSON: {exc}"}
        return json.dumps(fallback).encode("utf-8") + b"\n"


# -- the command -------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m voxwire.conformance",
        description="Run the conformance vectors against voxwire (default), against another "
        "implementation (--testee), or serve voxwire as a testee (--serve). Exit status: 0 when "
        "every case is as expected, 1 otherwise, 2 for a usage or file error.",
    )
    parser.add_argument(
        "--vectors",
        action="append",
        metavar="PATH",
        help="a vectors file (JSON Lines); repeatable; default: the files shipped with voxwire",
    )
    parser.add_argument("--protocol", action="append", help="run only this protocol (repeatable)")
    parser.add_argument("--kind", action="append", choices=KINDS, help="run only this kind")
    parser.add_argument("--match", metavar="TEXT", help="run only the cases whose id contains TEXT")
    parser.add_argument(
        "--testee",
        metavar="COMMAND",
        help="another implementation to run (one shell-quoted string)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="the testee's time to answer one case (default 10)",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="added to the first answer after the testee (re)starts (default 30)",
    )
    parser.add_argument(
        "--expected-failures",
        metavar="FILE",
        help="ids expected to fail, one a line; default: voxwire's own list without --testee, "
        "none with it",
    )
    parser.add_argument("--serve", action="store_true", help="be a testee: answer stdin on stdout")
    parser.add_argument("--list", action="store_true", help="print the selected case ids and exit")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also show the expected failures"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.serve:
        return serve(sys.stdin.buffer, sys.stdout.buffer)
    try:
        cases = load_cases(args.vectors)
        if args.expected_failures:
            path = Path(args.expected_failures)
            listed = load_expected_failures(path.read_text(encoding="utf-8"), str(path))
        elif args.testee:
            listed = {}
        else:
            listed = _default_expected_failures()
    except (VectorError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    known = [c.id for c in cases]
    selected = [
        c
        for c in cases
        if (not args.protocol or c.protocol in args.protocol)
        and (not args.kind or c.kind in args.kind)
        and (not args.match or args.match in c.id)
    ]
    if args.list:
        for c in selected:
            print(c.id)
        return 0
    started = time.monotonic()
    if args.testee:
        testee = Testee(shlex.split(args.testee), args.timeout, args.startup_timeout)
        try:
            report = run(selected, testee.ask, listed, known)
        except VectorError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        finally:
            testee.stop()
    else:
        report = run(selected, lambda case: answer(request(case)), listed, known)
    for line in report.lines(verbose=args.verbose):
        print(line)
    print(f"({time.monotonic() - started:.1f} s)")
    return 0 if report.ok else 1
